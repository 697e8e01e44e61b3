import pytest

from guardrails import GuardrailConfigError, GuardrailPolicy, GuardrailsConfig


def test_defaults_are_off_and_valid():
    policy = GuardrailPolicy.from_dict(None)
    assert policy.pii_action == "off" and policy.injection_action == "off" and not policy.checks_input
    assert "EMAIL_ADDRESS" in policy.pii_entities


def test_from_dict_builds_a_full_policy():
    policy = GuardrailPolicy.from_dict(
        {
            "pii_entities": ["EMAIL_ADDRESS", "EMAIL_ADDRESS", "CREDIT_CARD"],
            "pii_thresholds": {"CREDIT_CARD": 0.9},
            "pii_action": "redact",
            "redaction_style": "mask",
            "output_pii_action": "block",
            "injection_action": "block",
            "injection_threshold": 0.7,
        }
    )
    assert policy.pii_entities == ("EMAIL_ADDRESS", "CREDIT_CARD")
    assert policy.threshold_for("CREDIT_CARD") == 0.9 and policy.threshold_for("EMAIL_ADDRESS") == 0.4
    assert policy.checks_input


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"pii_actoin": "redact"}, ["pii_actoin", "known keys"]),
        ({"pii_action": "scrub"}, ["pii_action", "scrub", "redact"]),
        ({"injection_action": "redact"}, ["injection_action"]),
        ({"redaction_style": "hash"}, ["redaction_style"]),
        ({"injection_threshold": 1.5}, ["injection_threshold", "less than or equal to 1"]),
        ({"pii_thresholds": {"EMAIL_ADDRESS": -0.1}}, ["EMAIL_ADDRESS"]),
        ({"pii_thresholds": {"EMAIL_ADDRESS": True}}, ["EMAIL_ADDRESS"]),
        ({"pii_entities": "EMAIL_ADDRESS"}, ["pii_entities"]),
        ({"pii_thresholds": ["EMAIL_ADDRESS"]}, ["pii_thresholds"]),
        ({"injection_threshold": "0.5"}, ["injection_threshold='0.5'"]),
        ({"pii_entities": ["EMAIL_ADDRESS", 7]}, ["pii_entities[1]=7"]),
    ],
)
def test_bad_policies_name_the_value(raw, words):
    with pytest.raises(GuardrailConfigError) as error:
        GuardrailPolicy.from_dict(raw)
    for word in words:
        assert word in str(error.value)


def test_policy_must_be_a_mapping():
    with pytest.raises(GuardrailConfigError, match="valid dictionary"):
        GuardrailPolicy.from_dict(["redact"])


@pytest.mark.parametrize(
    "raw, word",
    [
        ({"pii_engine": "regex"}, "pii_engine"),
        ({"spacy_model_path": ""}, "spacy_model_path"),
        ({"stream_max_holdback_chars": 4}, "stream_max_holdback_chars"),
        ({"modle_path": "x"}, "modle_path"),
    ],
)
def test_bad_config_names_the_value(raw, word):
    with pytest.raises(GuardrailConfigError, match=word):
        GuardrailsConfig.from_dict(raw)


def test_unsupported_entity_is_a_clear_error(guardrails_engine):
    with pytest.raises(GuardrailConfigError, match="spacy_model_path"):
        guardrails_engine.check_policy(GuardrailPolicy(pii_entities=("NRP",), pii_action="redact"))
    with pytest.raises(GuardrailConfigError, match="NOT_AN_ENTITY"):
        guardrails_engine.check_input(["hi"], GuardrailPolicy(pii_entities=("NOT_AN_ENTITY",), pii_action="detect"))


def test_names_places_and_organizations_need_no_spacy_model(guardrails_engine):
    policy = GuardrailPolicy.from_dict(
        {"pii_entities": ["PERSON", "LOCATION", "ORGANIZATION"], "pii_action": "block", "output_pii_action": "redact"}
    )
    guardrails_engine.check_policy(policy)
    assert guardrails_engine.check_input(["Please call Maria Gonzalez today"], policy).action == "block"


def test_a_bare_yaml_off_reads_as_off():
    """YAML 1.1 reads `injection_action: off` as false; an operator means "off" (a user trial, 2026-12-08)."""
    import yaml

    policy = GuardrailPolicy.from_dict(
        yaml.safe_load("pii_action: off\noutput_pii_action: redact\ninjection_action: off")
    )
    assert (policy.pii_action, policy.output_pii_action, policy.injection_action) == ("off", "redact", "off")
    with pytest.raises(GuardrailConfigError):
        GuardrailPolicy.from_dict(yaml.safe_load("injection_action: on"))  # true is no action
