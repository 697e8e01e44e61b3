"""Import Presidio and spaCy without letting them pull in torch and transformers.

Presidio (its Hugging Face NER pipe) and spaCy (thinc's torch shim) import torch and transformers whenever they are
installed, which costs ~7 s of CPU and hundreds of MB at gateway start-up and breaks docs/architecture.md's "the
gateway runs without torch". Guardrails use neither: so while Presidio loads, both names are marked unimportable
(Python's documented `sys.modules[name] = None` convention), and unmarked afterwards, so a later `import torch`
(the optional injection classifier) works normally. Nothing is hidden from a process that already imported them.

Import this module before any `presidio_analyzer` or `spacy` import in guardrails/.
"""

from __future__ import annotations

import sys

_HIDDEN = tuple(name for name in ("torch", "transformers") if name not in sys.modules)
for _name in _HIDDEN:
    sys.modules[_name] = None  # type: ignore[assignment]
try:
    import presidio_analyzer  # noqa: F401
    import presidio_analyzer.nlp_engine  # noqa: F401
    import presidio_analyzer.predefined_recognizers  # noqa: F401
    import spacy  # noqa: F401
finally:
    for _name in _HIDDEN:
        if sys.modules.get(_name, 0) is None:
            del sys.modules[_name]
