"""The exit codes of ``kvtop`` (the dashboard, ``--once``, ``--check``, ``--stream``)."""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_INTERRUPTED = 130
