"""Suite-wide settings.

In CI (``CI`` set) Hypothesis runs derandomised: the same examples every run, so a red run is reproducible
and a green one is not luck. Locally it explores new examples each run, and keeps failures in its database.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
