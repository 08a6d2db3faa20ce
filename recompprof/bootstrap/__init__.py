"""The start-up hook ``recompprof run`` puts on PYTHONPATH (see ``sitecustomize.py``); not imported as a package."""
