"""The hardware check, ``python -m ttdecode hwcheck``: the first run on a Wormhole, decisive and safe.

- ``kinds``: the program kinds (one table, one line a kind) and the timing points;
- ``programs``: each kind's inputs, float64 reference, our device call and ttnn's op;
- ``check``: one kind run three times and judged (which path failed: the full descriptor or the lean one);
- ``timing``: device time per call through a traced loop, and tt-metal's device profiler;
- ``readme_loop``: the README's traced decode loop, the very lines the README shows;
- ``worker`` / ``runner``: the worker process and its watchdog (hang guard);
- ``report``: the JSON report, its schema (``report.json.schema``) and the markdown summary;
- ``cli``: the command line.
"""
