"""Readers of an installed vLLM release or its source (by `ast`, or in a child of its interpreter), and the
facts they return.
"""
