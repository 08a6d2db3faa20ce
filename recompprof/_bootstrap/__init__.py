"""Start-up hooks that attach recompprof when ``RECOMPPROF_ATTACH=1`` (see ``autoattach.py``); they load
their files by path, so this package is never imported at start-up."""
