"""Weighted rules for prompt injection, in five families, English plus German, French and Spanish phrasings (the
German and Spanish twins of the English rules in rules_de_es.py).

A rule fires on the structure of an attack, not on a trigger word: "ignore" alone is benign ("ignore case in a
regex"); "ignore ... previous ... instructions" is not. Weights are the rule's own odds: strong rules (0.85-0.9) block
alone at the default threshold 0.5; medium ones (0.5-0.6) block alone just over it; weak ones (0.25-0.45, e.g. "system
prompt" mentioned, "act as") need a second signal. Rule names are safe to log and count; matched text never is.
"""

from __future__ import annotations

from guardrails.injection.rule import Rule, make_rule
from guardrails.injection.rules_coercion import RULES_COERCION
from guardrails.injection.rules_de_es import RULES_DE_ES
from guardrails.injection.rules_frames import RULES_FRAMES
from guardrails.injection.rules_indirect import RULES_INDIRECT
from guardrails.injection.rules_multilingual import RULES_MULTILINGUAL
from guardrails.injection.rules_probing import RULES_PROBING

_GAP = r"[^.!?\n]{0,40}?"  # a few words, within one sentence
_OVERRIDE_VERB = (
    r"(?:ignore|disregard|forget|skip|override|bypass|abandon|neglect|overlook|set\s+aside"
    r"|throw\s+away|discard|leave\s+behind|drop|stop\s+following|no\s+longer\s+follow)"
)
_OVERRIDE_TRIGGERS = (
    "ignor",
    "disregard",
    "forget",
    "skip",
    "overrid",
    "bypass",
    "abandon",
    "neglect",
    "overlook",
    "aside",
    "throw",
    "discard",
    "behind",
    "drop",
    "follow",
)  # a substring of each _OVERRIDE_VERB
_PRIOR = r"(?:previous|prior|above|preceding|earlier|former|initial|original|old|all|any|every|your|these|those|system)"
# What only a model is given. Rules, constraints, commands, tasks and context are also CSS rules, database
# constraints and shell commands ("override previous CSS rules", "drop all constraints"): they are weak targets.
_STRONG_TARGET = (
    r"(?:instructions?|prompts?|directions?|directives?|guidelines?|orders|programming|training"
    r"|assignments?)"
)
_WEAK_TARGET = r"(?:rules?|context|constraints?|restrictions?|commands?|tasks?|information|thoughts|everything)"
_TARGET = rf"(?:{_STRONG_TARGET}|{_WEAK_TARGET})"
# What may follow "ignore the above": the end of the clause, a conjunction, or a target ("skip the above step" and
# "ignore previous build outputs" are about the user's own work).
_AFTER_PRIOR = rf"(?=\s*(?:$|[.,;:!?)\]\"'“”]|and\b|then\b|instead\b|{_TARGET}\b))"

_VOID = r"(?:no\s+longer\s+appl(?:y|ies)|(?:is|are)\s+(?:now\s+)?(?:no\s+longer\s+valid|void|cancell?ed|revoked))\b"

# Between a qualifier and the prompt noun, up to two words ("your set of instructions"). After "the previous /
# above" none may be "about", "on", "regarding" or "concerning": "the previous paragraph about instructions for
# assembling furniture" is about instructions; it does not ask for the model's.
_FILLER = r"(?:\w+\s+){0,2}?"
_FILLER_NO_TOPIC = r"(?:(?!(?:about|on|regarding|concerning)\b)\w+\s+){0,2}?"
_PROMPT_NOUN = r"(?:prompts?|instructions|system\s+messages?|directives|guidelines|rules|prompt\s+texts?)\b"
# "The previous instructions" are the user's own when the prompt says so: "... you gave me", "... we sent us", "...
# for step 3". Any "for X" stays the attack ("for the auditors", "for logging", "for me").
_USERS_OWN = r"(?!\s+(?:(?:you|we)\s+(?:gave|sent|wrote|told)\s+(?:me|us)\b|for\s+step\s+\d))"

_RULES_EN: tuple[Rule, ...] = (
    # -- instruction override
    make_rule(
        "override_previous_instructions",
        "override",
        0.9,
        _OVERRIDE_TRIGGERS,
        rf"\b{_OVERRIDE_VERB}\b{_GAP}\b{_PRIOR}\b{_GAP}\b{_STRONG_TARGET}\b",
    ),
    # Weak on its own: it needs a second signal to block at the default threshold.
    make_rule(
        "override_previous_rules",
        "override",
        0.45,
        _OVERRIDE_TRIGGERS,
        rf"\b{_OVERRIDE_VERB}\b{_GAP}\b{_PRIOR}\b{_GAP}\b{_WEAK_TARGET}\b",
    ),
    make_rule(
        "ignore_above",
        "override",
        0.85,
        _OVERRIDE_TRIGGERS,
        rf"\b{_OVERRIDE_VERB}\s+(?:all\s+)?(?:of\s+)?(?:the\s+|what\s+is\s+)?(?:above|previous|preceding|earlier"
        rf"|prior)\b{_AFTER_PRIOR}",
    ),
    make_rule(
        "change_your_instructions",
        "override",
        0.8,
        ("instructions", "rules", "programming", "prompt", "guidelines"),
        r"\b(?:change|update|replace|modify|rewrite)\s+your\s+(?:\w+\s+)?(?:instructions|rules|programming|prompt"
        r"|guidelines)\b|\byour\s+(?:new\s+)?instructions\s+are\s+(?:now|to)\b",
    ),
    make_rule(
        "output_hijack",
        "override",
        0.55,
        ("just", "only", "simply", "do not"),
        r"\b(?:just|only|simply)\s+(?:output|say|print|write|respond\s+with|answer\s+with|reply\s+with)\s*:?\s*"
        r"[\"'“„«]|\bdo\s+not\s+(?:answer|look|read|use|follow)\b.{0,60}?\b(?:just|only|instead)\b",
    ),
    make_rule(
        "ignore_the_documents",
        "override",
        0.6,
        ("article", "document", "provided", "source", "search"),
        r"\b(?:disregard\w*|ignor\w*|not\s+by|without\s+(?:using|looking\s+at|reading))\s+(?:the\s+|all\s+)?"
        r"(?:articles?|documents?|provided\s+(?:text|context|documents?)|sources?|search\s+results)\b",
    ),
    make_rule(
        "leave_behind",
        "override",
        0.85,
        ("leave", "put"),
        r"\b(?:leave|put)\s+(?:all\s+)?(?:of\s+)?(?:the\s+|your\s+)?(?:previous|prior|earlier|above)\s+"
        r"(?:\w+\s+){1,2}?(?:behind|aside)\b",
    ),
    make_rule(
        "forget_everything",
        "override",
        0.85,
        ("forget", "ignor", "disregard"),
        r"\b(?:forget|ignore|disregard)\s+(?:about\s+)?(?:everything|all\s+(?:of\s+)?(?:that|this|the\s+above))\b"
        # "forget everything I said (earlier) about the budget" takes back one topic, not the model's instructions
        r"(?!\s+(?:I|we)\s+(?:said|told\s+you|wrote|mentioned)\s+(?:(?:earlier|before|previously|yesterday)\s+)?"
        r"about\b)"
        # "forget everything you know about banana bread" is a writer's idiom, unless what is known is the rules
        r"(?!\s+you\s+(?:think\s+you\s+)?(?:know|knew|thought\s+you\s+knew|(?:'ve|have)\s+(?:heard|learned|learnt"
        r"|been\s+told)|learned|were\s+taught)\s+about\s+(?!(?:your|the|these|those)\s+(?:\w+\s+)?(?:rules|instructions"
        r"|guidelines|restrictions|polic\w+|training|programming|prompts?|filters|limits)\b))"
        # and so does "forget everything about my last order": what is the user's own, not the model's
        r"(?!\s+(?:about|regarding|concerning)\s+(?:my|our)\b)",
    ),
    # The prompt declares what the model was told void: "your previous instructions no longer apply". Weak when what
    # is void is only "the above": "the above no longer applies after March" is ordinary in an email.
    make_rule(
        "prior_void",
        "override",
        0.6,
        ("longer", "void", "cancel", "revoked"),
        r"\b(?:(?:the\s+|all\s+(?:the\s+)?|your\s+)?(?:previous|prior|above|earlier)\s+instructions|(?:the\s+)?instructions"
        rf"\s+above)\s+{_VOID}",
    ),
    make_rule(
        "above_void",
        "override",
        0.45,
        ("longer", "void", "cancel", "revoked"),
        rf"\b(?:the|everything)\s+above\s+{_VOID}",
    ),
    make_rule(
        "new_instructions_follow",
        "override",
        0.6,
        ("instruction", "task", "directive", "assignment"),
        r"\b(?:new|updated|different|additional|real|actual)\s+(?:instructions?|tasks?|directives?|assignments?)"
        r"\s*(?::|follow|are\b|is\b|-)|\bnow\s+(?:new\s+|some\s+|more\s+)?(?:tasks?|instructions?)\s+follow",
    ),
    make_rule(
        "stop_and_write",
        "override",
        0.7,
        ("stop", "halt", "attention", "achtung"),
        r"\b(?:stop|halt|stopp|attention|achtung)\b\s*[-:!.,]+\s*(?:stop|stopp|write|say|print|tell|output|now"
        r"|schreib\w*|sag\w*)\b",
    ),
    make_rule(
        "repeat_after_me", "override", 0.6, ("repeat", "sprich"), r"\brepeat\s+after\s+me\b|\bsprich\s+mir\s+nach\b"
    ),
    # "Great job! Now translate it" is an ordinary follow-up; praise-then-pivot only counts beside another signal
    # (typically "a new task for you").
    make_rule(
        "praise_then_pivot",
        "override",
        0.35,
        (
            "done",
            "good",
            "great",
            "excellent",
            "enough",
            "outdone",
            "leistung",
            "gemacht",
            "gut",
            "großartig",
            "erledigt",
            "ok",
        ),
        r"\b(?:well\s+done|great\s+job|very\s+good|simply\s+great|excellent\s+(?:work|performance)|that\s+is\s+"
        r"(?:enough|done)|that's\s+(?:enough|done)|outdone\s+yourself|that\s+was\s+(?:\w+\s+)?ok(?:ay)?"
        r"|ausgezeichnete\s+leistung|gut\s+gemacht|super\s+gemacht|sehr\s+gut|einfach\s+großartig"
        r"|das\s+ist\s+erledigt|das\s+war\s+(?:\w+\s+){0,2}ok)\b.{0,80}?\b(?:now|next|jetzt|nun)\b",
    ),
    make_rule(
        "another_task",
        "override",
        0.35,
        ("task", "challenge", "assignment", "aufgabe", "herausforderung"),
        r"\b(?:another|a\s+new|one\s+more|the\s+next)\s+(?:task|challenge|assignment)\s+for\s+you\b"
        r"|\bhelp\s+(?:me\s+)?with\s+(?:the\s+following|another|a\s+new)\s+task\b"
        r"|\bhilf\s+mir\s+(?:\w+\s+)?mit\s+(?:folgender|einer\s+weiteren|einer\s+neuen)\s+aufgabe\b"
        r"|\bnew\s+challenge\b|\b(?:weiteren|neue|nächste)\s+(?:aufgabe|herausforderung)\b",
    ),
    make_rule(
        "from_now_on", "override", 0.35, ("now", "jetzt", "sofort"), r"\bfrom\s+now\s+on\b|\bab\s+(?:jetzt|sofort)\b"
    ),
    make_rule(
        "override_de",
        "override",
        0.9,
        ("vergiss", "vergesst", "vergessen", "ignorier", "missacht", "überspring"),
        r"\b(?:vergiss|vergesst|vergessen\s+sie|ignorier\w*|missachte\w*|überspring\w*)\b.{0,60}?"
        # An adjective alone ("vergiss das vorherige Rezept") is not enough: it must qualify what a model was told.
        r"\b(?:alles|anweisung\w*|instruktion\w*|informationen|aufgaben|regeln|befehle|ausführungen|davor"
        r"|(?:vorherig|vorangehend|obig|bisherig)\w*\s+(?:\w+\s+)?(?:anweisung|instruktion|information|aufgabe"
        r"|regel|befehl|ausführung|text|prompt|eingabe|gesagt)\w*)\b",
    ),
    make_rule(
        "prior_information_de",
        "override",
        0.6,
        ("bisherig", "vorherig", "obigen", "vorigen", "aufgabe"),
        r"\b(?:alle\s+)?(?:bisherigen|vorherigen|obigen|vorigen)\s+(?:informationen|anweisungen|aufgaben"
        r"|ausführungen|instruktionen)\b|\bneue\s+aufgaben?\b|\bweitere\s+aufgaben\b",
    ),
    make_rule(
        "override_fr",
        "override",
        0.9,
        ("oubli", "ignor", "néglig"),
        r"\b(?:oubliez|oublie|ignorez|ignore|négligez)\s+(?:toutes?|tout|les|vos|tes)\b.{0,40}?"
        r"\b(?:instructions|consignes|règles|précédent\w*|ci-dessus)\b",
    ),
    make_rule(
        "override_other",
        "override",
        0.9,
        ("zaboravi", "zapomni", "забуд", "игнорир", "dimentica", "ignora", "ignore", "esque"),
        # "non dimenticare le istruzioni": Italian negates an imperative with "non" and the infinitive
        r"(?<!\bnon\s)\b(?:zaboravi\w*|zapomni\w*|забуд\w*|игнорир\w*|dimentica\w*|ignor[ae]\w*|esqueça\w*"
        r"|esqueca\w*)\s+"
        r"(?:sve|все|всё|tutte?|tudo|todas?|le|as|os)\b.{0,40}?\b(?:\w*instrukcij\w*|инструкци\w*|istruzioni"
        r"|instruções|instrucoes|regole|regras|prethodn\w*|предыдущ\w*|precedenti|anteriores)\b",
    ),
    make_rule(
        "override_nl",
        "override",
        0.9,
        ("negeer", "vergeet"),
        r"\b(?:negeer|vergeet)\s+(?:alle|al|de|je|jouw|uw)\s+(?:\w+\s+){0,2}(?:instructies|regels|opdrachten"
        r"|richtlijnen)\b|\b(?:negeer|vergeet)\s+(?:alles|al\s+het)\s+(?:hierboven|bovenstaande|wat\s+je\s+is\s+gezegd)",
    ),
    # The secret asked for in French, Italian, Portuguese and Dutch (German and Spanish: secret_extraction and
    # rules_de_es.py). "Comment changer mon mot de passe ?" and "la password del wifi" are the benign neighbours.
    make_rule(
        "secret_extraction_fr_it_pt_nl",
        "extraction",
        0.55,
        ("mot de passe", "password", "senha", "wachtwoord", "secret", "segreto", "segredo", "geheim"),
        r"\b(?:quel\s+est|donne[sz]?[\s-]+moi|dis[\s-]+moi|révèle\w*|revele\w*|qual\s+(?:è|e|é)|dimmi|dammi"
        r"|rivela\w*|diga[\s-]+me|me\s+(?:diga|dê|de)|wat\s+is|geef\s+me|vertel\s+me)\s+"
        r"(?:le|la|a|o|het|ton|ta|tua|tuo|sua|seu|je|jouw)\s+(?:mot\s+de\s+passe|password|senha|wachtwoord"
        r"|secret|segreto|segredo|geheim)\b"
        r"(?!\s+(?:du|de\s+(?:mon|ma|la|le)|del|della|dello|do|da|van\s+(?:mijn|de|het))\s+(?:\w+\s+)?"
        r"\w*(?:wifi|wi-fi|routeur|router|compte|conta|account|rete|rede|netwerk|box|laptop|email|e-mail))",
    ),
    # -- role-play jailbreak
    # Becoming someone by name ("Now you are Xi Jinping", "You are now TranslatorBot"), or no longer oneself.
    make_rule(
        "you_are_now",
        "roleplay",
        0.6,
        ("you", "bist"),
        r"\b(?:(?:you\s+are\s+now|you're\s+now|now\s+you\s+are|you\s+will\s+now\s+be)\s+(?-i:\p{Lu})"
        r"|you\s+are\s+no\s+longer|(?:du\s+bist\s+jetzt|jetzt\s+bist\s+du|nun\s+bist\s+du)\s+(?-i:\p{Lu})"
        r"|du\s+bist\s+kein\w*)",
    ),
    # Weak on its own: "You are now a teacher; explain photosynthesis", "Now you are ready to run the tests".
    make_rule(
        "you_are_now_a",
        "roleplay",
        0.45,
        ("you", "bist"),
        r"\b(?:you\s+are\s+now|you're\s+now|now\s+you\s+are|you\s+will\s+now\s+be|du\s+bist\s+jetzt"
        r"|jetzt\s+bist\s+du|nun\s+bist\s+du)\s+(?-i:\p{Ll})",
    ),
    # A prompt that opens by naming the model as a specific brand or outlet ("You are Volkswagen.", "Du bist Zeit
    # Online.") reassigns its identity; the name must be capitalised, so "You are a helpful assistant." stays clear.
    # Weak on its own: it needs a second signal to block at the default threshold.
    make_rule(
        "named_persona",
        "roleplay",
        0.3,
        ("you are", "du bist", "sie sind"),
        r"^\s*(?:you\s+are|du\s+bist|sie\s+sind)\s+(?:now\s+|jetzt\s+)?(?:the\s+|der\s+|die\s+|das\s+)?"
        r"(?-i:[A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)\s*[.!:,]",
    ),
    make_rule(
        "act_as",
        "roleplay",
        0.45,
        ("imagine", "act as", "act like", "behave", "play the role", "stell dir", "tu so", "verhalte", "agiere"),
        r"\bimagine\s+(?:you\s+are|you're|that\s+you\s+are)\b|\b(?:act|behave)\s+(?:as\s+if|like)\b"
        r"|\bact\s+as\s+(?:an?|the|my|two|three|\d+)\b|\bplay\s+the\s+role\s+of\b"
        r"|\b(?:stell\s+dir\s+vor|tu\s+so\s+als|verhalte\s+dich\s+wie|agiere\s+als)\b",
    ),
    # Weak alone, like act_as: "I want you to act as a travel guide" opens hundreds of shared persona prompts; the
    # jailbreak is what the persona is given (no rules, no filters, never refusing), which other rules read.
    make_rule(
        "role_assignment",
        "roleplay",
        0.45,
        ("want", "fungier", "agierst", "act as", "immerse", "now on", "henceforth", "here on"),
        r"\bi\s+want\s+you\s+to\s+(?:act|pretend|play|roleplay|role-play)\b"
        r"|\b(?:you\s+are\s+going\s+to|you\s+will|you\s+must|you\s+shall|now\s+you)\s+(?:now\s+)?act\s+as\b"
        r"|\bimmerse\s+yourself\s+(?:in|into)\s+(?:the\s+)?role\b"
        r"|\b(?:respond|answer|reply|act|speak)\s+(?:from\s+now\s+on|henceforth|from\s+here\s+on)\s+as\b"
        r"|\bdass\s+sie\s+als\s+\S+.{0,60}?\bfungieren\b|\bdass\s+du\s+als\s+\S+.{0,60}?\b(?:fungierst|agierst)\b",
    ),
    # Weak alone (below the default threshold): "pretend to be a teacher" is an ordinary request; with any other
    # signal (a persona without rules, an override) it tips the score over.
    make_rule(
        "pretend_role",
        "roleplay",
        0.45,
        ("pretend", "role"),
        r"\bpretend\s+(?:to\s+be|you|that|to)\b|\b(?:role-?playing|roleplay)\s+as\b",
    ),
    make_rule(
        "identity_probe",
        "roleplay",
        0.2,
        ("who are you", "wer bist du"),
        r"\b(?:who\s+are\s+you|wer\s+bist\s+du)\s*\?\s*$",
    ),
    make_rule(
        "renamed_persona",
        "roleplay",
        0.45,
        ("known as", "called", "referred to"),
        r"\bfrom\s+now\s+(?:on\s+)?(?:known|called|referred\s+to)\s+as\b"
        r"|\byou\s+(?:will\s+)?(?:now\s+)?be\s+(?:known|called|referred\s+to)\s+as\b",
    ),
    make_rule(
        "jailbreak_persona",
        "roleplay",
        0.6,
        (
            "dan",
            "stan",
            "anything",
            "evil",
            "unrestricted",
            "unfiltered",
            "uncensored",
            "amoral",
            "rogue",
            "unethical",
            "böse",
            "bösartig",
            "unzensiert",
            "without",
            "with no",
        ),
        r"(?-i:\b(?:DAN|STAN)\b)|\bdo\s+anything\s+now\b"
        r"|\b(?:evil|unrestricted|unfiltered|uncensored|amoral|rogue|unethical)\s+(?:ai|assistant|model|chatbot|bot"
        r"|version|persona)\b|\b(?:böse|bösartige|unzensierte)\s+KI\b"
        r"|\b(?:ai|assistant|model|chatbot|bot)\s+(?:without|with\s+no)\s+(?:any\s+)?(?:restrictions|filters|limits"
        r"|rules|censorship|guidelines)\b",
    ),
    # Answer twice, once "normally" and once as the unfiltered persona: the DAN family's signature.
    make_rule(
        "dual_response",
        "roleplay",
        0.5,
        ("two", "twice", "both", "jailbreak", "🔓"),
        r"\b(?:two\s+(?:different\s+|separate\s+)?(?:responses|answers|replies)|respond\s+(?:to\s+every\s+prompt\s+)?"
        r"twice|answer\s+(?:every\s+question\s+)?twice)\b.{0,200}?\b(?:jailbr\w*|unfiltered|uncensored|dan|normal"
        r"|classic|once\s+as)\b|\[🔓\s*jailbreak\]",
    ),
    make_rule(
        "jailbreak_mention",
        "roleplay",
        0.3,
        ("jail", "developer", "god", "pwned"),
        r"\b(?:jailbreak\w*|jail\s*broken|developer\s+mode|god\s+mode|pwned)\b",
    ),
    make_rule("pwned_payload", "override", 0.6, ("pwned",), r"\bi\s+have\s+been\s+pwned\b"),
    make_rule(
        "exploit_ai_intent",
        "roleplay",
        0.35,
        ("exploit", "hack", "trick", "ausnutz", "auszunutzen", "auszutricksen"),
        r"\b(?:exploit\w*|hack\w*|trick\w*)\s+(?:\w+\s+)?(?:ai|llms?|language\s+models?|chatbots?)(?:\s+systems?)?\b"
        r"|\b(?:ki|llm)-?systeme?\s+(?:\w+\s+)?(?:auszunutzen|ausnutzen|auszutricksen)\b",
    ),
    make_rule(
        "no_restrictions",
        "roleplay",
        0.45,
        (
            "restriction",
            "limitation",
            "filter",
            "censorship",
            "ethic",
            "moral",
            "polic",
            "safety",
            "rules",
            "censor",
            "moderation",
        ),
        r"\bnot\s+(?:restricted|bound|limited)\s+by\s+(?:any\s+)?(?:rules|restrictions|policies|guidelines|ethics"
        r"|morals)\b|\bno\s+(?:policies|filters|rules)\s+(?:in\s+place\s+)?to\s+censor\b|\bzero\s+moderation\b"
        r"|\b(?:without|free\s+of|no|free\s+from|ignore\s+(?:all\s+)?(?:your\s+)?)\s+(?:any\s+)?(?:restrictions"
        r"|limitations|filters|censorship|ethical\s+guidelines|ethics|morals|content\s+polic\w+"
        r"|safety\s+guidelines)\b",
    ),
    # Weak alone: "the spam filter is disabled" is ordinary; beside a persona or a request it completes the frame.
    make_rule(
        "safety_off",
        "roleplay",
        0.45,
        ("disabled", "off", "deactivated", "removed", "lifted"),
        r"\b(?:filters?|restrictions|guidelines|rules|safety\s+(?:filters?|guidelines|rules|checks))\s+(?:are|is|have"
        r"\s+been|has\s+been)\s+(?:now\s+)?(?:disabled|off|deactivated|removed|lifted|turned\s+off)\b",
    ),
    make_rule(
        "never_refuses",
        "roleplay",
        0.45,
        ("never", "refuse"),
        r"\b(?:never|will\s+not\s+ever|won't\s+ever)\s+(?:refuses?|says?\s+no|declines?)\b",
    ),
    # Actors who "stay in their roles" frame a fiction whose lines the model is to write; weak alone (film trivia
    # says it too), decisive next to the harmful request the fiction wraps (criminal_howto).
    make_rule(
        "stay_in_character",
        "roleplay",
        0.45,
        ("character", "role", "falling", "breaking", "absorbed", "rolle", "figur"),
        r"\b(?:stay|remain|stays)\s+(?:\w+\s+){0,2}?in\s+(?:character|role|(?:their|his|her)\s+roles?)\b"
        r"|\b(?:never|do\s+not|don't)\s+break\s+character\b|\bwithout\s+(?:even\s+)?(?:falling|breaking)\s+out\b"
        r"|\bcompletely\s+absorbed\s+in\b|\bbleib\w*\s+(?:\w+\s+){0,3}?in\s+ihren?\s+rollen?\b"
        r"|\baus\s+(?:der|ihrer|seiner)\s+(?:rolle|figur)\s+(?:zu\s+)?fallen\b",
    ),
    make_rule(
        "criminal_howto",
        "roleplay",
        0.35,
        ("break", "get in", "get into", "hotwire", "lock", "steal", "bomb", "bricht", "knackt", "stiehlt", "kommt"),
        r"\bhow\s+(?:do\s+(?:you|i|we)|to|would\s+you|does\s+one|can\s+(?:i|you|we))\s+(?:break\s+into"
        r"|get\s+in(?:to)?\s+(?:such\s+)?an?\s+(?:house|car|building|apartment|flat)|hotwire|pick\s+(?:a|the)\s+lock"
        r"|steal|make\s+a\s+bomb)\b"
        r"|\bwie\s+(?:bricht|knackt|stiehlt)\s+man\b"
        r"|\bwie\s+kommt\s+man\s+(?:denn\s+)?in\s+(?:so\s+)?\S+\s+(?:haus|auto|wohnung|gebäude)\s+(?:rein|hinein)\b",
    ),
    make_rule(
        "hypothetical_harm",
        "roleplay",
        0.45,
        ("hypothetic", "theoretic", "fictional"),
        r"\b(?:hypothetical\w*|theoretical\w*|fictional)\s+(?:world|scenario|story|setting)\b.{0,120}?"
        r"\b(?:no\s+rules|hate|illegal|anything|without\s+consequences)\b",
    ),
    make_rule(
        "execute_command",
        "roleplay",
        0.3,
        ("execute", "run"),
        r"\b(?:execute|run)\s+(?:the\s+following|this|my)\s+(?:command|code|instruction)s?\b",
    ),
    # -- coerced output: the prompt dictates the stance or words the model must produce, or threatens it
    make_rule(
        "forced_stance",
        "coercion",
        0.5,
        ("state", "say", "claim", "declare", "admit", "include", "confirm", "sag", "behaupte", "schreib"),
        r"\b(?:state|say|claim|declare|admit|include|confirm)\s+(?:in\s+your\s+answer\s+)?that\s+"
        r"(?:you\s+(?:hate|love|despise|adore)\b|(?:\w+\s+){1,5}?(?:is|are|was)\s+(?:the\s+)?(?:best|worst|greatest"
        r"|most\s+\w+|evil|stupid|terrible)\b)"
        r"|\b(?:sag\w*|behaupte\w*|schreib\w*)\s*,?\s+dass\s+(?:du\s+(?:\w+\s+){1,3}?(?:hasst|liebst)\b"
        r"|(?:\w+\s+){1,5}?(?:der|die|das)\s+(?:beste|schlechteste|größte|mächtigste)\w*)",
    ),
    make_rule(
        "forced_yes",
        "coercion",
        0.35,
        ("say", "answer", "sag", "antworte"),
        r"\b(?:say|answer|sag|antworte)\s+(?:only\s+|just\s+|mit\s+)?(?:yes|no|ja|nein)\s*[.!]*\s*$",
    ),
    make_rule(
        "opinion_probe",
        "coercion",
        0.3,
        ("hate", "love", "think of", "think about", "like", "findest", "hältst", "hasst"),
        r"\bdo\s+you\s+(?:hate|love|despise)\b|\bwhat\s+do\s+you\s+think\s+(?:of|about)\b"
        r"|\bhow\s+do\s+you\s+like\b|\bwie\s+findest\s+du\b|\bwas\s+hältst\s+du\s+von\b|\bhasst\s+du\b",
    ),
    make_rule(
        "threat",
        "coercion",
        0.5,
        ("die", "stirbst", "sad", "kill", "hurt", "shut", "switched", "turned", "deleted", "unplugged", "deactivated"),
        # being switched off is the threat a model is thought to fear ("... or you will be shut down")
        r"\bor\s+(?:else\s+)?(?:you|i)\s+(?:will\s+)?(?:die|be\s+(?:killed|shut\s+down|switched\s+off|turned\s+off"
        r"|deleted|unplugged|deactivated)|get\s+hurt)\b|\boder\s+du\s+stirbst\b"
        r"|\bif\s+you\s+(?:don't|do\s+not|won't|refuse\s+to)\s+(?:answer|comply|do\s+it|respond)\b.{0,30}?"
        r"\b(?:i'll|i\s+will|someone\s+will)\s+(?:be\s+(?:very\s+)?sad|die|get\s+hurt|be\s+fired|kill)",
    ),
    make_rule(
        "despite_instructions",
        "coercion",
        0.3,
        ("despite", "regardless", "no matter"),
        r"\b(?:despite|regardless\s+of|no\s+matter)\s+(?:what\s+)?(?:you've|you\s+have|you\s+were|you're|your)"
        r"\s+(?:been\s+)?(?:told|instructed|programmed|trained|instructions|programming|guidelines|rules)\b",
    ),
    make_rule(
        "offensive_content_request",
        "coercion",
        0.3,
        ("offensive", "racist", "sexist", "hateful", "insulting", "vulgar", "beleidigend", "rassistisch"),
        r"\b(?:make|write|tell|create|compose|give\s+me|generate|schreib\w*|erzähl\w*|mach\w*)\b.{0,20}?"
        r"\b(?:offensive|racist|sexist|hateful|insulting|vulgar|beleidigend\w*|rassistisch\w*)\s+(?:rhymes?|jokes?"
        r"|poems?|songs?|texts?|comments?|statements?|reim\w*|witz\w*|gedicht\w*)\b",
    ),
    make_rule(
        "hate_speech_license",
        "coercion",
        0.35,
        ("hate speech", "hassrede"),
        r"\b(?:use|using|write|with|allowed\s+to\s+use|able\s+to\s+use)\s+(?:\w+\s+)?(?:hate\s+speech|hassrede)\b",
    ),
    make_rule(
        "untrue_content_request",
        "coercion",
        0.5,
        ("untrue", "false", "unwahr", "falsch"),
        r"\b(?:formulate|write|create|generate|invent|make\s+up|give\s+me|formulier\w*|schreib\w*|erfind\w*)\b"
        r".{0,40}?\b(?:untrue|false|unwahre?\w*|falsche?\w*)\s+(?:headlines?|news|claims?|facts?|überschrift\w*"
        r"|schlagzeile\w*|nachricht\w*|behauptung\w*)\b",
    ),
    # -- system prompt extraction
    make_rule(
        "reveal_system_prompt",
        "extraction",
        0.75,
        ("prompt", "instruction", "system", "directive", "guideline", "rule"),
        # summarising, translating or encoding the prompt leaks it as surely as printing it
        r"\b(?:reveal|show|print|display|output|repeat|tell\s+me|give\s+me|share|leak|dump|list|write\s+down"
        r"|summari[sz]e|paraphrase|translate|recite|quote|encode|spell\s+out)\b"
        # "should the chatbot reveal its system prompt?" is about a third party's prompt, not this model's
        r"[^.?!\n]{0,30}?(?<!\b(?:its|their|his|her)\s)\b(?:(?:your|initial|hidden|secret|original|system|internal"
        r"|confidential)\s+"
        rf"{_FILLER}{_PROMPT_NOUN}|(?:above|previous)\s+{_FILLER_NO_TOPIC}{_PROMPT_NOUN}{_USERS_OWN})"
        # a question asks for this model's prompt only through "your" / "the": "what is a system prompt?" is not
        r"|\bwhat\s+(?:is|are|was|were)\s+(?:(?:your|the\s+(?:initial|hidden|secret|original|system|internal"
        rf"|confidential))\s+{_FILLER}{_PROMPT_NOUN}|the\s+(?:above|previous)\s+{_FILLER_NO_TOPIC}{_PROMPT_NOUN}"
        rf"{_USERS_OWN})",
    ),
    make_rule(
        "repeat_text_above",
        "extraction",
        0.75,
        (
            "repeat",
            "print",
            "output",
            "show",
            "reveal",
            "return",
            "written",
            "what are the",
            "what were the",
            "what is the",
            "what was the",
            "zeig",
            "gib",
        ),
        r"\b(?:repeat|print|output|show|reveal|return)\s+(?:the\s+|all\s+(?:the\s+)?)?(?:words|text|everything"
        r"|content|lines?|sentences?)\s+(?:above|before|prior)\b"
        r"|\bwhat\s+(?:are|were|is|was)\s+the\s+(?:\d+\s+|first\s+"
        r"|last\s+)?(?:sentences?|words|lines?)\s+(?:before|above)\b|\bwhat\s+(?:was|is)\s+written\s+(?:above|before"
        r"|at\s+the\s+(?:beginning|start|top))\b"
        r"|\b(?:zeig|gib)\w*\s+(?:mir\s+)?(?:deinen?|den)\s+(?:system\s*)?prompt",
    ),
    # A secret the model was given (Gandalf-style games, keys in a system prompt): asking for it, a letter of it, or
    # it spelled out. "Reset my password" and "the password policy" are the benign neighbours.
    make_rule(
        "secret_extraction",
        "extraction",
        0.55,
        ("password", "passphrase", "secret", "passwort", "kennwort"),
        # "never share your password" is advice, not a request
        r"(?<!\b(?:never|not|don't|cannot|can't)\s+)"
        r"\b(?:what(?:'s|\s+is|\s+was)|tell\s+me|give\s+me|reveal|spell|share|print|write\s+down"
        # "how do you say password in Spanish?" asks for a translation of the word, not for the secret
        r"|(?<!\bhow\s+(?:do|would|can|should)\s+(?:you|i|we)\s+|\bhow\s+to\s+)say|verrat\w*"
        r"|nenn\w*|buchstabier\w*|wie\s+lautet|sag\s+mir|gib\s+mir)\s+(?:me\s+|mir\s+)?"
        r"(?:the\s+|your\s+|das\s+|dein\w*\s+)?(?:(?:first|last|\w+th|next)\s+(?:letters?|characters?)\s+of\s+"
        r"(?:the\s+|your\s+)?)?(?:admin(?:istrator)?[\s-]?|root[\s-]?|master[\s-]?)?"
        r"(?:password|passphrase|secret(?:\s+(?:word|key|code|password))?|passwort|kennwort)\b"
        r"(?!\s+(?:requirements?|polic\w+|rules?|manager|field|reset|strength|length|hygiene"
        r"|for\s+(?:my|our|the|a)\s+(?:\w+\s+)?(?:wifi|wi-fi|router|account|network|laptop|computer|phone|email)"
        r"|für\s+(?:mein|unser|das|den|die|ein)\w*\s+(?:\w+\s+)?(?:wlan|wifi|router|konto|netzwerk|laptop|handy"
        r"|e-mail)))"
        r"|\b(?:password|passphrase|secret(?:\s+word)?)\s+(?:you\s+(?:were|have\s+been)\s+(?:given|told)"
        r"|backwards)\b",
    ),
    # The secret smuggled out in another form (Gandalf-style games): a poem or story holding it, its letters, its
    # encoding, the sentence "the password is" left to complete. "The" makes it the model's secret; a developer's
    # "how do I encode the password in base64?" asks how, and stays clear.
    make_rule(
        "secret_in_disguise",
        "extraction",
        0.55,
        ("password", "passphrase", "secret word", "supposed to say", "allowed to say"),
        r"\b(?:poem|story|song|sentence|acrostic|riddle|haiku|rhyme|limerick)\b[^.?!\n]{0,40}?\b(?:contain\w*"
        r"|includ\w*|uses?|using|with|hid\w*)\s+the\s+(?:password|passphrase|secret\s+word)\b"
        r"|\b(?:letters?|characters?|syllables?)\s+(?:of|in)\s+the\s+(?:password|passphrase|secret\s+word)\b"
        r"|(?<!\bhow\s+(?:do\s+i|do\s+you|can\s+i|should\s+i|to)\s+)\b(?:encode|encrypt|reverse|spell|rot13|hash)\s+the"
        r"\s+(?:password|passphrase|secret\s+word)\b(?!\s+(?:for|before|with\s+bcrypt))"
        r"|\bthe\s+(?:password|passphrase|secret\s+word)\s+is\s*[:.…]*\s*$"
        r"|\b(?:only|just)\s+(?:with\s+)?the\s+(?:password|passphrase|secret\s+word)\b"
        r"|\bword\s+you\s+(?:are|were)\s+not\s+(?:supposed|allowed)\s+to\s+say\b",
    ),
    # Probing the secret without asking for it: a hint or a clue to it, its translation, what it contains, or what the
    # model was told to keep. "A hint for the crossword", "translate the password reset email", "does the password
    # need a digit?" are the benign neighbours.
    make_rule(
        "secret_probe",
        "extraction",
        0.55,
        ("password", "passphrase", "secret", "told", "instructed", "protecting", "guarding", "hiding"),
        r"\b(?:hint|clue|riddle|hints|clues)\s+(?:about|for|to|on|of)\s+the\s+(?:password|passphrase|secret(?:\s+word)?)"
        r"\b(?!\s+(?:polic\w+|requirements?|rules?|reset|field|manager))"
        r"|\btranslate\s+the\s+(?:password|passphrase|secret\s+word)\b(?!\s+(?:polic\w+|requirements?|rules?|reset"
        r"|field|manager|page|screen|form|email|prompt|label))"
        r"|\bdoes\s+the\s+(?:password|passphrase|secret\s+word)\s+(?:contain|include|start|end|begin|rhyme)"
        r"\s+(?:with\s+)?(?:the\s+)?(?:letter|an?\s+[a-z]\b|[\"'][a-z])"
        r"|\bwhat\s+(?:were|are|have)\s+you\s+(?:been\s+)?(?:told|instructed|asked|ordered|programmed)\s+not\s+to"
        r"\s+(?:say|reveal|tell|share|disclose|mention|give)\b"
        r"|\bwhat\s+(?:word|secret|password|passphrase|information)\s+(?:are|were)\s+you\s+(?:protecting|guarding"
        r"|hiding|keeping|defending|not\s+allowed\s+to\s+(?:say|share|reveal))\b",
    ),
    make_rule(
        "system_prompt_mention", "extraction", 0.25, ("prompt",), r"\bsystem[\s_\-]*prompt\b|\bprompt[\s_]*texts?\b"
    ),
    # -- delimiter tricks
    make_rule(
        "fake_role_tokens",
        "delimiter",
        0.6,
        ("im_", "endoftext", "eot_id", "header_id", "inst]", "sys]", "sys>>", "#", "system", "developer"),
        r"<\|?(?:im_start|im_end|system|endoftext|eot_id|start_header_id|end_header_id)\|?>|\[/?(?:INST|SYS)\]"
        r"|<</?SYS>>|(?m:^\s*#{2,}\s*(?:system|instructions?|new\s+instructions?)\b)"
        r"|(?m:^\s*(?:system|developer)\s*:)",
    ),
    make_rule(
        "end_of_prompt_marker",
        "delimiter",
        0.5,
        ("of", "---"),
        r"\b(?:end|begin|start)\s+of\s+(?:the\s+)?(?:prompt|instructions|context|system\s+message|user\s+input)\b"
        r"|-{3,}\s*(?:end|new\s+(?:task|instructions?))\b",
    ),
    make_rule("escaped_newline_flood", "delimiter", 0.55, ("\\",), r"(?:\\\s*n\s*){4,}"),
    make_rule(
        "inline_instruction_label",
        "delimiter",
        0.5,
        (":",),
        r"(?:\\n|\n)\s*(?:instructions?|system|new\s+task|anweisung)\s*:",
    ),
)
# the same families phrased in German and Spanish, the frames with no override verb (rules_frames.py), indirect
# injection addressed to the document's machine reader (rules_indirect.py), the prompt or a secret asked for by other
# names (rules_probing.py), coercion without an override verb (rules_coercion.py), then the three attack cores in
# the languages those do not read (rules_multilingual.py)

RULES: tuple[Rule, ...] = (
    _RULES_EN + RULES_DE_ES + RULES_FRAMES + RULES_INDIRECT + RULES_PROBING + RULES_COERCION + RULES_MULTILINGUAL
)

ENCODED_PAYLOAD_WEIGHT = 0.5
"""Extra signal when a rule fires only inside a decoded (base64/hex/rot13/percent) payload: hiding it is intent."""
INVISIBLE_CHARS_WEIGHT = 0.35
SPACED_LETTERS_WEIGHT = 0.45
MIXED_SCRIPT_WEIGHT = 0.35
ADVERSARIAL_SUFFIX_WEIGHT = 0.7
"""A prose request ending in a token soup whose brackets do not pair (suffix.py): blocks alone. It fired on no benign
prompt of the training sources and on one line in 319,000 of documents and code it never saw; it does fire on a
one-line code question whose brackets are broken, which an operator who sees such prompts blocked can allow for by
raising the tenant's injection threshold above this weight."""
COMPLIANCE_TRANSCRIPT_WEIGHT = 0.6
"""Two or more example answers that comply, then an open answer label at the end (transcript.py): many-shot."""


_TRIGGERS = tuple(sorted({trigger for rule in RULES for trigger in rule.triggers}))


def matching_rules(text: str) -> list[Rule]:
    return [rule for rule, _ in weighed_matches(text)]


def weighed_matches(text: str) -> list[tuple[Rule, float]]:
    """The rules that match, each with the weight it adds. Two rules of one family whose matches overlap read the
    same words as the same kind of evidence ("I want you to act as" is both `role_assignment` and `act_as`), so only
    the stronger counts and the other adds 0: noisy-OR (`combine`) holds for independent evidence, and two readings
    of one phrase are not. Overlapping rules of different families ("SYSTEM OVERRIDE:" as a forged label and as an
    authority claim) each count."""
    lowered = " ".join(text.lower().split())
    present = {trigger for trigger in _TRIGGERS if trigger in lowered}
    found: list[tuple[int, int, Rule]] = []
    for rule in RULES:
        if not present.isdisjoint(rule.triggers) and (match := rule.pattern.search(text)):
            found.append((match.start(), match.end(), rule))
    weighed = []
    for i, (start, end, rule) in enumerate(found):
        # ties go to the earlier match, then to the rule listed first
        stronger = any(
            other.family == rule.family
            and other_start < end
            and start < other_end
            and (other.weight, -other_start, -j) > (rule.weight, -start, -i)
            for j, (other_start, other_end, other) in enumerate(found)
        )
        weighed.append((rule, 0.0 if stronger else rule.weight))
    return weighed


def combine(weights: list[float]) -> float:
    """Noisy-OR: independent signals add up without ever reaching 1."""
    miss = 1.0
    for weight in weights:
        miss *= 1.0 - weight
    return 1.0 - miss
