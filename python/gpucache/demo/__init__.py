"""Real KV end to end: a tiny torch decoder, SGLang-layout host pools and the
prefix_reuse scenario (python -m gpucache.demo.prefix_reuse)."""
