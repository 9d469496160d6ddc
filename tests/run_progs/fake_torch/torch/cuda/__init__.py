"""torch.cuda of the stand-in: its memory module."""
from . import memory  # noqa: F401
