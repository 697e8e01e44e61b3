import subprocess
import sys

PROBE = """
import sys
from guardrails import GuardrailPolicy, Guardrails
light = [m for m in ("presidio_analyzer", "spacy", "torch") if m in sys.modules]
verdict = Guardrails().check_input(["mail a@example.com"], GuardrailPolicy(pii_action="redact"))
print(light, verdict.texts[0], [m for m in ("torch", "transformers") if m in sys.modules])
"""


def test_the_gateway_side_stays_torch_free():
    """docs/architecture.md: the gateway imports without torch. Run in a fresh interpreter (this session may have
    torch)."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=240, check=True)
    assert out.stdout.strip() == "[] mail <EMAIL_ADDRESS> []"
