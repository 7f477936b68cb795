"""Print om's OpenAPI document as the API serves it at /openapi.json (the TypeScript client's types are
generated from it: ``npm run generate``).

The app is built as ``om serve`` builds it, over a throwaway SQLite file with the keyless local model, so
no database, broker or API key is needed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from om_api.app import create_app
from om_core.bootstrap import build_inline
from om_core.settings import ServerSettings


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="om-openapi-") as folder:
        url = f"sqlite:///{folder}/schema.sqlite3"
        deps, dispatcher = build_inline(database_url=url, profile={"model": "om-local/extractive"})
        try:
            document = create_app(ServerSettings(database_url=url), deps).openapi()
        finally:
            dispatcher.close()
            deps.close()
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
