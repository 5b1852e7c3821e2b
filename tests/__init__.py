"""The test suite, a package: tests import their shared helpers relatively
(``from .posteriordb_cases import ...``, ``from .engine_runs import ...``), not through
``sys.path``. ``benchmarks/compare.py`` puts this directory on its own ``sys.path`` to import
``posteriordb_cases``, so the helper modules themselves use absolute imports only.
"""
