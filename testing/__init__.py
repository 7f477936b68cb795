"""Support for the tests and benchmarks: scratch databases, private servers, worker processes.

Not part of om: pyproject.toml lists the packages the wheel ships, and this one is not among them. The
tests and ``bench/`` import it from the checkout, whose root is on ``sys.path`` (pytest puts it there for
the ``tests`` package; ``python -m bench.…`` runs from it).
"""
