"""What pd-doctor knows about vLLM, NIXL and models, as data and readers (the lowest feature layer).

Releases and what is fixed where, connectors (with their aliases and extra packages), advisories,
the origin index (every message vLLM/NIXL writes, per release), metric names per release, readers of
an installed vLLM's source and config, and model resolution. Every feature above asks here; nothing
here imports a feature, a format or the CLI.
"""
