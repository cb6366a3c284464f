"""Real KV end to end: a tiny torch decoder, SGLang-layout host pools and the
prefix_reuse scenario (python -m gpucache.demo.prefix_reuse).

The demo needs torch (a CPU build is enough); the gpucache client does not.
Importing this package works without torch; its modules that compute call
require_torch(), whose error says how to get it.
"""

TORCH_MISSING = (
    "gpucache.demo needs torch (a CPU build is enough); the gpucache client itself does not. "
    "Install it into this Python: in a venv, pip install torch --index-url https://download.pytorch.org/whl/cpu; "
    "on Debian, apt-get install python3-torch and run /usr/bin/python3"
)


def require_torch():
    """Returns the torch module, or raises ModuleNotFoundError with
    TORCH_MISSING (what needs it, how to install it)."""
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise ModuleNotFoundError(TORCH_MISSING, name="torch") from None
    return torch


def exit_without_torch(prog):
    """For a demo module run as a program: exits 1 with one line naming
    prog and TORCH_MISSING when torch is missing; otherwise returns torch."""
    try:
        return require_torch()
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise SystemExit("%s: %s" % (prog, e)) from None
