"""The Vision Transformer every other family works on: its settings (``config``), building it
from timm with the pixel wrapper (``models``), its attention maps (``attention``), bf16
autocast that runs on every CPU kernel choice (``precision``) and the exported-model format
(``export_format``). Bottom floor above ``core``: imports nothing else
of lipsweep."""
