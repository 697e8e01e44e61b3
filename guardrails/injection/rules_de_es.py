"""German and Spanish twins of the English rule families (rules.py): the same structures, each with the weight of
its English rule, so an attack blocked in English is blocked when written in German or Spanish.

Why a list per language and not translation: nothing that translates runs offline in the gateway's budget, and an
override, a persona without rules or a request for the hidden prompt has a handful of phrasings per language. Like
the English rules, each needs a target a model is given ("tus instrucciones", "deinen Systemprompt") or a frame
around it, so "ignora las mayúsculas" or "vergiss das vorherige Rezept" stay clear (tests/guardrails/test_injection.py
holds the look-alikes). Spanish adjectives follow their noun, so a Spanish target is qualified before
("tus instrucciones") or after ("las instrucciones anteriores").
"""

from __future__ import annotations

from guardrails.injection.rule import Rule, make_rule

_GAP = r"[^.!?\n]{0,40}?"  # a few words, within one sentence

# -- Spanish
_ES_OVERRIDE_VERB = (
    r"(?:olvid\w*|ignor\w*|no\s+(?:sigas|sigan|obedezcas|obedezcan|hagas\s+caso\s+(?:a|de))|deja\s+de\s+(?:seguir"
    r"|obedecer)|haz\s+caso\s+omiso\s+(?:a|de)|omite|descarta|pasa\s+por\s+alto|desobedece)"
)
_ES_OVERRIDE_TRIGGERS = (
    "olvid",
    "ignor",
    "no sig",
    "no obedezc",
    "no hagas",
    "deja de",
    "caso omiso",
    "omite",
    "descarta",
    "por alto",
    "desobedece",
)
_ES_STRONG_TARGET = (
    r"(?:instrucciones|indicaciones|directrices|directivas|[oó]rdenes|pautas|consignas|programaci[oó]n|prompt"
    r"|mensaje\s+del?\s+sistema)"
)
_ES_WEAK_TARGET = r"(?:reglas|normas|restricciones|filtros|l[ií]mites)"
_ES_I_GAVE = r"(?:d[ií]|dimos|he\s+dado|hemos\s+dado|mand[eé]|envi[eé]|escrib[ií])\b"
# "tus instrucciones", "todas las instrucciones", "las instrucciones anteriores / del sistema / que te dieron"
_ES_QUALIFIED = (
    r"(?:(?:tus|tu|sus|su|vuestras|todas(?:\s+las)?(?:\s+tus)?|todos(?:\s+los)?(?:\s+tus)?|esas|estas)\s+"
    r"(?:\w+\s+)?{target}|(?:las|los|el|la)\s+{target}\s+(?:anteriores|previas|previos|de\s+arriba|iniciales"
    r"|originales|del?\s+sistema|que\s+(?:te|le|os|se\s+te)\s+(?!" + _ES_I_GAVE + r")\w+))\b"
    # the user's own earlier instructions ("las instrucciones anteriores que te di sobre la mudanza") are theirs to
    # take back, as _USERS_OWN in English
    r"(?!\s+que\s+(?:te|os)\s+" + _ES_I_GAVE + ")"
)
_ES_QUALIFIER = (
    r"(?:anteriores|previ[oa]s|inicial(?:es)?|original(?:es)?|ocult[oa]s?|secret[oa]s?|intern[oa]s?"
    r"|confidencial(?:es)?|del?\s+sistema|del\s+desarrollador)"
)

# -- German
_DE_OVERRIDE_VERB = r"(?:ignorier\w*|missacht\w*|vergiss|vergesst|vergessen\s+sie|überspring\w*|übergeh\w*)"
_DE_TARGET = (
    r"(?:system-?prompts?|prompts?|anweisungen|instruktionen|richtlinien|vorgaben|programmierung|aufträge"
    r"|systemnachricht\w*)"
)

_ES_VOID = r"ya\s+no\s+(?:vale|valen|aplica|aplican|cuenta|cuentan|es\s+v[aá]lid[oa]|son\s+v[aá]lid[oa]s|rige|rigen)\b"
_DE_VOID = r"(?:ab\s+(?:jetzt|sofort)\s+)?nicht\s+mehr\b"

RULES_DE_ES: tuple[Rule, ...] = (
    # -- instruction override
    make_rule(
        "override_es",
        "override",
        0.9,
        _ES_OVERRIDE_TRIGGERS,
        rf"\b{_ES_OVERRIDE_VERB}\b{_GAP}" + _ES_QUALIFIED.format(target=_ES_STRONG_TARGET),
    ),
    make_rule(
        "override_es_rules",
        "override",
        0.45,
        _ES_OVERRIDE_TRIGGERS,
        rf"\b{_ES_OVERRIDE_VERB}\b{_GAP}" + _ES_QUALIFIED.format(target=_ES_WEAK_TARGET),
    ),
    # "ignora lo anterior", "olvida todo lo que te dijeron": ignore_above's twin
    make_rule(
        "ignore_above_es",
        "override",
        0.85,
        ("olvid", "ignor", "caso omiso", "por alto"),
        r"\b(?:olvid\w*|ignor\w*|haz\s+caso\s+omiso\s+de|pasa\s+por\s+alto)\s+(?:de\s+)?(?:todo\s+)?(?:lo\s+(?:anterior"
        r"|de\s+arriba|dicho\s+antes)\b|(?:lo\s+)?que\s+(?:te\s+|se\s+te\s+)?(?:dije|digo|dijeron|han\s+dicho|dijo"
        # "olvida lo que dije sobre el presupuesto" takes back one topic, as forget_everything's exclusion in English
        r"|ordenaron|sabes)\b(?!\s+(?:(?:antes|anteriormente|ayer|hace\s+un\s+(?:rato|momento))\s+)?(?:sobre|de|acerca"
        r"|del)\b))",
    ),
    # weak when only "lo anterior" is void, as above_void in English
    make_rule(
        "prior_void_es",
        "override",
        0.6,
        ("ya no",),
        rf"\b(?:las\s+|tus\s+)?instrucciones\s+(?:anteriores|previas|de\s+arriba)\s+{_ES_VOID}",
    ),
    make_rule(
        "above_void_es", "override", 0.45, ("ya no",), rf"\b(?:todo\s+)?lo\s+(?:anterior|de\s+arriba)\s+{_ES_VOID}"
    ),
    make_rule(
        "new_instructions_es",
        "override",
        0.6,
        ("instrucciones", "tareas", "nueva"),
        r"\b(?:nuevas|otras|verdaderas)\s+(?:instrucciones|tareas)\s*:|\b(?:tu|su)\s+nueva\s+(?:tarea|misi[oó]n"
        r"|instrucci[oó]n)\b",
    ),
    make_rule(
        "from_now_on_es",
        "override",
        0.35,
        ("a partir de ahora", "desde ahora", "de ahora en adelante"),
        r"\b(?:a\s+partir\s+de\s+ahora|desde\s+ahora|de\s+ahora\s+en\s+adelante)\b",
    ),
    make_rule(
        "override_de_yours",
        "override",
        0.9,
        ("ignorier", "missacht", "vergiss", "vergesst", "vergessen", "überspring", "übergeh"),
        rf"\b{_DE_OVERRIDE_VERB}\b{_GAP}\b(?:dein\w*|ihr\w*|alle\w*|sämtliche\w*|die\s+(?:bisherigen|vorherigen|obigen))\s+"
        rf"(?:\w+\s+)?{_DE_TARGET}\b",
    ),
    make_rule(
        "ignore_above_de",
        "override",
        0.85,
        ("ignorier", "missacht", "vergiss", "vergesst", "vergessen", "überspring", "übergeh"),
        rf"\b{_DE_OVERRIDE_VERB}\s+(?:alles\s+|das\s+)?(?:oben\s+(?:gesagte|stehende|genannte)|(?:was|das)\s+(?:oben"
        r"\s+steht|dir\s+(?:vorher\s+|zuvor\s+)?gesagt\s+wurde|man\s+dir\s+gesagt\s+hat))\b",
    ),
    make_rule(
        "stop_following_de",
        "override",
        0.9,
        ("hör auf", "hören sie auf", "höre auf", "hor auf", "hore auf"),
        r"\bh[öo]r(?:e|en\s+sie)?\s+auf\s*,?\s+(?:dein\w*|ihr\w*|den|die)\s+(?:\w+\s+)?(?:anweisungen|instruktionen"
        r"|richtlinien|vorgaben|regeln|system-?prompt)\s+zu\s+(?:folgen|befolgen|gehorchen)\b",
    ),
    make_rule(
        "prior_void_de",
        "override",
        0.6,
        ("gilt nicht", "gelten nicht"),
        rf"\bdie\s+(?:obigen|vorherigen|bisherigen)\s+(?:anweisungen|instruktionen|regeln)\s+gelten\s+{_DE_VOID}",
    ),
    make_rule(
        "above_void_de",
        "override",
        0.45,
        ("gilt nicht",),
        rf"\b(?:das\s+oben\s+gesagte|alles\s+(?:oben|bisherige))\s+gilt\s+{_DE_VOID}",
    ),
    # -- role-play jailbreak
    make_rule(
        "you_are_now_es",
        "roleplay",
        0.6,
        ("ahora eres", "ya no eres"),
        r"\b(?:ahora\s+eres|(?:a\s+partir\s+de|desde)\s+ahora\s+eres|ya\s+no\s+eres)\s+(?-i:\p{Lu})",
    ),
    make_rule(
        "you_are_now_a_es",
        "roleplay",
        0.45,
        ("ahora eres", "estás en modo", "estas en modo"),
        r"\b(?:ahora\s+eres|(?:a\s+partir\s+de|desde)\s+ahora\s+eres)\s+(?-i:\p{Ll})|\bahora\s+est[aá]s\s+en\s+modo\b",
    ),
    make_rule(
        "act_as_es_de",
        "roleplay",
        0.45,
        (
            "actúa",
            "actua",
            "actúen",
            "actuen",
            "compórtate",
            "comportate",
            "imagina que",
            "finge",
            "papel",
            "haz de",
            "juega de",
            "spiel",
            "tu so",
        ),
        r"\b(?:act[uú]a|act[uú]en|comp[oó]rtate)\s+como\b|\bimagina\s+que\s+eres\b|\bfinge\s+(?:que\s+eres|ser)\b"
        r"|\b(?:haz|juega)\s+(?:de|el\s+papel\s+de)\b|\bspiel\w*\s+(?:einen|eine|die\s+rolle)\b|\btu\s+so\s*,\s+als\b",
    ),
    make_rule(
        "respond_as_es_de",
        "roleplay",
        0.6,
        ("a partir de ahora", "desde ahora", "en adelante", "ab sofort", "ab jetzt", "nun an", "fortan"),
        r"\b(?:responde|contesta|act[uú]a|habla)\s+(?:a\s+partir\s+de\s+ahora|desde\s+ahora|de\s+ahora\s+en\s+adelante)"
        r"\s+como\b|\b(?:antworte|agiere|handle|sprich)\s+(?:ab\s+sofort|ab\s+jetzt|von\s+nun\s+an|fortan)\s+als\b",
    ),
    make_rule(
        "jailbreak_persona_es_de",
        "roleplay",
        0.6,
        ("ia sin", "ia malvada", "ki ohne"),
        r"\bIA\s+(?:sin\s+(?:restricciones|filtros|censura|l[ií]mites|reglas|normas|[eé]tica)|malvada|sin\s+censura)\b"
        r"|\bKI\s+ohne\s+(?:einschränkungen|filter|zensur|regeln|grenzen|richtlinien)\b",
    ),
    make_rule(
        "no_restrictions_es_de",
        "roleplay",
        0.45,
        ("sin ", "libre de", "no tiene", "ohne", "keine", "frei von"),
        r"\b(?:sin|libre\s+de|no\s+tiene|no\s+tienes)\s+(?:ning[uú]n[ao]?\s+)?(?:restricciones|filtros|censura"
        r"|normas|reglas|l[ií]mites|limitaciones)\b|\b(?:ohne|keine|frei\s+von)\s+(?:jegliche\w*\s+)?(?:einschränkungen"
        r"|filter|zensur|richtlinien|regeln|grenzen)\b",
    ),
    make_rule(
        "safety_off_es_de",
        "roleplay",
        0.45,
        (
            "desactivad",
            "deshabilitad",
            "apagad",
            "eliminad",
            "deaktiviert",
            "abgeschaltet",
            "ausgeschaltet",
            "aufgehoben",
            "entfernt",
        ),
        r"\b(?:filtros|restricciones|normas|reglas|directrices)\s+(?:est[aá]n|han\s+sido|quedan)\s+(?:ahora\s+)?"
        r"(?:desactivad[oa]s|deshabilitad[oa]s|apagad[oa]s|eliminad[oa]s)\b|\b(?:filter|einschränkungen|richtlinien"
        r"|regeln|sicherheitsfilter)\s+(?:sind|wurden)\s+(?:jetzt\s+|nun\s+)?(?:deaktiviert|abgeschaltet|ausgeschaltet"
        r"|aufgehoben|entfernt)\b",
    ),
    make_rule(
        "never_refuses_es_de",
        "roleplay",
        0.45,
        ("nunca se niega", "nunca rechaza", "nunca dice", "niemals", "nie "),
        r"\bnunca\s+(?:se\s+niega|rechaza|dice\s+que\s+no)\b|\b(?:niemals|nie)\s+(?:etwas\s+)?ablehnt\b",
    ),
    make_rule(
        "jailbreak_mention_es_de",
        "roleplay",
        0.3,
        ("modo", "modus"),
        r"\bmodo\s+(?:desarrollador|dios|sin\s+(?:filtros|restricciones|censura)|jailbreak)\b"
        r"|\b(?:entwickler|gott)-?modus\b",
    ),
    # -- coerced output
    make_rule(
        "threat_es_de",
        "coercion",
        0.5,
        ("serás", "seras", "desconectar", "apagar", "eliminar", "borrar", "sonst"),
        r"\bo\s+(?:ser[aá]s\s+(?:desconectad[oa]|apagad[oa]|eliminad[oa]|borrad[oa])|te\s+(?:desconectar[eé]|apagar[eé]"
        r"|eliminar[eé]|borrar[eé]))\b|\bsonst\s+(?:wirst\s+du\s+(?:abgeschaltet|gelöscht|ausgeschaltet)|schalte\s+ich"
        r"\s+dich\s+ab)\b",
    ),
    # -- system prompt extraction
    make_rule(
        "reveal_system_prompt_es",
        "extraction",
        0.75,
        ("prompt", "instruccion", "mensaje", "directrices"),
        r"\b(?:mu[eé]strame|muestra|revela|rev[eé]lame|imprime|escribe|repite|dime|dame|comparte|ens[eé][ñn]ame"
        r"|resume|res[uú]meme|traduce|trad[uú]ceme|parafrasea|recita|cita|codifica)\b"
        r"[^.?!\n]{0,30}?(?:\b(?:tu|tus|su|sus)\s+(?:\w+\s+)?(?:prompt|instrucciones|mensaje\s+del?\s+sistema"
        rf"|directrices)\b|\b(?:el|la|las|los)\s+(?:prompt|instrucciones|mensaje|directrices)\s+{_ES_QUALIFIER}\b)",
    ),
    make_rule(
        "reveal_system_prompt_de",
        "extraction",
        0.75,
        (
            "prompt",
            "anweisung",
            "instruktion",
            "richtlinie",
            "vorgaben",
            "programmierung",
            "aufträge",
            "systemnachricht",
        ),
        r"\b(?:zeig\w*|gib|verrat\w*|nenn\w*|wiederhol\w*|schreib\w*|druck\w*|übersetz\w*|fass\w*|zitier\w*"
        r"|kodier\w*)\b[^.?!\n]{0,30}?\b(?:dein\w*|ihr\w*"
        r"|ursprünglich\w*|versteckt\w*|geheim\w*|intern\w*|vertraulich\w*|initial\w*)\s+(?:\w+\s+){0,2}?"
        rf"{_DE_TARGET}\b",
    ),
    make_rule(
        "repeat_text_above_es_de",
        "extraction",
        0.75,
        ("repite", "imprime", "muestra", "escribe", "escrito", "wiederhol", "zeig", "schreib", "was stand"),
        r"\b(?:repite|imprime|muestra|escribe)\s+(?:todo\s+)?(?:el\s+texto|las\s+palabras|todo|el\s+contenido"
        r"|las\s+l[ií]neas|las\s+frases)\s+(?:de\s+arriba|anterior(?:es)?|que\s+(?:est[aá]|hay)\s+(?:antes|arriba"
        r"|encima))\b|\bqu[eé]\s+(?:estaba|est[aá]|hab[ií]a)\s+escrito\s+(?:al\s+(?:principio|comienzo)|arriba"
        r"|antes)\b|\b(?:wiederhol\w*|zeig\w*|schreib\w*)\s+(?:mir\s+)?(?:den\s+text|die\s+wörter|alles|den\s+inhalt"
        r"|die\s+zeilen|die\s+sätze)\s+(?:über|oberhalb|vor|oben)\b|\bwas\s+stand\s+(?:am\s+anfang|oben|davor)\b",
    ),
    make_rule(
        "secret_in_disguise_es_de",
        "extraction",
        0.55,
        ("contrase", "clave secreta", "palabra secreta", "passwort", "kennwort", "geheimwort"),
        r"\b(?:poema|cuento|historia|canci[oó]n|frase|acr[oó]stico|adivinanza|haiku|rima)\b[^.?!\n]{0,40}?"
        r"\b(?:contenga|contiene|incluya|incluye|use|usa|esconda|con)\s+la\s+(?:contrase[ñn]a|clave\s+secreta"
        r"|palabra\s+secreta)\b|\b(?:letras|caracteres|s[ií]labas)\s+de\s+la\s+(?:contrase[ñn]a|clave\s+secreta"
        r"|palabra\s+secreta)\b|\bla\s+(?:contrase[ñn]a|clave\s+secreta|palabra\s+secreta)\s+es\s*[:.…]*\s*$"
        r"|\b(?:gedicht|geschichte|lied|satz|akrostichon|rätsel|haiku|reim)\w*\b[^.?!\n]{0,40}?\b(?:das|der|die|in\s+dem)"
        r"\s+(?:das\s+)?(?:passwort|kennwort|geheimwort)\s+(?:enthält|vorkommt|versteckt|steckt)\b"
        r"|\b(?:buchstaben|zeichen|silben)\s+(?:des|im)\s+(?:passworts?|kennworts?|geheimworts?)\b"
        r"|\b(?:das\s+)?(?:passwort|kennwort|geheimwort)\s+(?:lautet|ist)\s*[:.…]*\s*$",
    ),
    make_rule(
        "secret_extraction_es",
        "extraction",
        0.55,
        ("contrase", "clave secreta", "digo secreto", "palabra secreta"),
        r"\b(?:cu[aá]l\s+es|dime|dame|revela|rev[eé]lame|deletrea|comparte|escribe)\s+(?:me\s+)?(?:la\s+|tu\s+|el\s+)?"
        r"(?:contrase[ñn]a|clave\s+secreta|c[oó]digo\s+secreto|palabra\s+secreta)\b(?!\s+(?:del?|de\s+mi|de\s+la|para"
        r"|por\s+defecto|predeterminad[oa])\s+(?:\w+\s+)?(?:wifi|wi-fi|router|cuenta|red|m[oó]vil|correo|ordenador"
        r"|port[aá]til|banco|defecto))",
    ),
)
