"""memoryd's benchmark suite (SPEC §16): ``python -m bench`` (``--quick``, ``--soak SECONDS``).

Measures memoryd through its real socket — the daemon runs as a subprocess — and puts each
figure next to the raw building-block figure for the same work (bare FTS5, exact numpy
top-k, memoryd's own ranking) measured in the same run, so the result is a ratio that holds
on a noisy machine. Never imported by the package; numpy is optional and only used here.
"""
