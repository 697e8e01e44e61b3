"""Template sentences with names, places, organizations and street addresses, labelled as they are generated.

The corpora are news, Wikipedia and tweets; a gateway sees requests ("Email Priya Sharma at Acme GmbH about the
invoice"), multi-cultural names and postal addresses. `sentences(split, n, seed)` fills templates from lists/:
split "train" uses the train part of each list and 4 of every 5 templates, "test" only held-out entries and
held-out templates, so the template test measures unseen names in unseen phrasings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from guardrails.ner.lists import word_list

PER, LOC, ORG = "PERSON", "LOCATION", "ORGANIZATION"
# {P} person, {L} place, {O} organization, {A} street address (labelled LOCATION); {p}, {l}: a second one.
TEMPLATES = [
    "Please send the contract to {P} at {O} before Friday.",
    "Can you draft an email to {P} about the delayed shipment?",
    "{P} from {O} called about the invoice.",
    "My name is {P} and I live at {A}.",
    "Ship it to {A}.",
    "Our office moved to {A} last month.",
    "Hi {P}, thanks for the update on the {L} project.",
    "I met {P} and {p} in {L} last week.",
    "{P} is the new CFO of {O}.",
    "Write a reference letter for {P}, who worked with us at {O} for three years.",
    "The meeting with {O} is in {L} on Tuesday.",
    "Book a flight from {L} to {l} for {P}.",
    "Summarise the complaint {P} sent to {O}.",
    "Dear {P}, your order will be delivered to {A}.",
    "According to {P}, {O} will open a branch in {L}.",
    "Translate this note for {P}: the parcel is at {A}.",
    "{O} hired {P} as head of research.",
    "Tell {P} that {p} will join the call.",
    "The invoice from {O} lists {A} as the billing address.",
    "What time zone is {L} in? {P} is calling from there.",
    "Contact: {P}, {O}, {L}",
    "Regards,\n{P}\n{O}",
    "Patient {P}, born in {L}, was referred by Dr. {P_LAST}.",
    "Mr. {P_LAST} and Ms. {p_LAST} signed for {O}.",
    "{P} ({O}) asked whether the {L} warehouse is open.",
    "Forward this to {P}; she handles accounts at {O}.",
    "I work for {O} in {L} and my manager is {P}.",
    "The tenant {P} has lived at {A} since 2019.",
    "Can {P} review the pull request before {p} merges it?",
    "We are visiting {L} and {l} in June.",
    "{P} said the deal with {O} fell through.",
    "Please update the address for {P} to {A}.",
    "Sehr geehrte Frau {P_LAST}, Ihre Bestellung wird an {A} geliefert.",
    "{P} arbeitet seit 2020 bei {O} in {L}.",
    "Bitte schicken Sie die Unterlagen an {P}, {A}.",
    "Herr {P_LAST} von {O} hat angerufen.",
    "Wir treffen {P} morgen in {L}.",
    "Cher {P}, votre colis est arrivé au {A}.",
    "{P} travaille chez {O} à {L}.",
    "Estimado {P}, su pedido se enviará a {A}.",
    "{P} trabaja en {O} en {L}.",
    "ok so {P} from {O} just texted me lol",
    "anyone know if {O} is hiring in {L}?",
    "{P} and {p} are leading the {O} partnership.",
    "The {O} team in {L} owns the billing service.",
    "I grew up in {L}, {l} but now live in {L}.",
    "Is {L} or {l} cheaper for a week in May?",
    "{P} flew to {L} to meet the {O} board.",
    "Add {P} ({O}, {L}) to the guest list.",
    "Where is {O} headquartered? I think in {L}, {l}.",
    "Reminder: call {P} at {O} about the {L} lease.",
    "Our supplier in {L} is {O}; the contact there is {P}.",
    "Send flowers to {P}, {A}, with a card from {p}.",
    "Herzliche Grüße aus {L}, {P}",
    "{P} a déménagé à {L} l'an dernier.",
    "Saludos desde {L}. Atentamente, {P}",
    "can u ask {P} if {O} pays the {L} invoice",
    "The lawsuit between {O} and {O} is being heard in {L}.",
    "{P}, {p} and {P} all moved to {L}.",
    "The conference in {L} is sponsored by {O} and {O}.",
    # Mail, forms and records: what a gateway's prompts carry that news and tweets do not.
    "-----Original Message-----\nFrom: {P}\nSent: Monday, March 3, 2025 9:14 AM\nTo: {p}\nSubject: RE: {L} site visit",
    "Thanks,\n{P}\n{O}\n{A}",
    "Name: {P}\nCompany: {O}\nCity: {L}",
    '{LB}"name": "{P}", "employer": "{O}", "address": "{A}"{RB}',
    "| {P} | {O} | {L} |",
    "{P_LAST}, {P_FIRST}; {p_LAST}, {p_FIRST}",
    "cc: {P}; {p}",
    "Please call {P} or {p} at the {L} office.",
    "Dr. {P} will chair the session on Thursday.",
    "Per {P}'s request, the {O} account moves to {L}.",
    "Our client, {P}, resides at {A}.",
    "The {L} branch of {O} is closing in May.",
    "{P}, CEO of {O}, declined to comment.",
    "Emergency contact: {P} (sister), {A}",
    "Ship to:\n{P}\n{A}",
    "I'm {P_FIRST}, nice to meet you!",
    "Ask {P_FIRST} in accounting, or email {p_FIRST}.",
    "Mit freundlichen Grüßen\n{P}\n{O}",
    "Cordialement,\n{P}\n{O}, {L}",
    "Un saludo,\n{P}",
    "Patient: {P}, DOB 04/12/1987, address: {A}",
    "Invoice to: {O}, {A}, attn. {P}",
    "Can you check whether {P} still lives in {L}?",
    "rewrite this bio: {P} grew up in {L} and joined {O} in 2015.",
    "Summarize the thread between {P} and {p} about the {O} merger.",
    "Applicant: {P}\nCurrent employer: {O}\nLocation: {L}, {l}",
    "{P} ({L}) wrote: the {O} refund never arrived.",
    "Hey {P_FIRST}, are you still at {O}?",
    "Lieber {P_FIRST}, wir sehen uns in {L}.",
    "Hola {P_FIRST}, ¿sigues trabajando en {O}?",
]
# Capitalized words that are not entities: sentence starts, weekdays, products, acronyms.
NEGATIVES = [
    "The report is due on Monday.",
    "Please review the attached notes.",
    "Thanks, that works for me!",
    "Use Python 3.12 and run the tests with pytest.",
    "Convert the JSON to CSV in Excel.",
    "What is the difference between TCP and UDP?",
    "Summarise the Q3 results in five bullet points.",
    "I need a SQL query that joins Orders and Customers.",
    "Happy New Year to the whole team!",
    "Explain Kubernetes pods like I am five.",
    "Is it Monday or Tuesday in your time zone?",
    "The API returns HTTP 404 when the ID is missing.",
    "Add a README and a LICENSE file.",
    "Write a Haiku about Autumn rain.",
    "Meeting notes: Budget, Hiring, Roadmap.",
    "OK, Done. Next?",
    "Bitte fassen Sie den Bericht zusammen.",
    "Merci pour votre aide.",
    "Gracias por la respuesta.",
    "Set the Timeout to 30 seconds in the Settings page.",
    "Open the Terminal and type ls.",
]
_US_STREET_TYPES = ("Street", "St.", "Avenue", "Ave", "Road", "Rd.", "Boulevard", "Lane", "Drive", "Way", "Court")
_UK_STREET_TYPES = ("Road", "Street", "Lane", "Close", "Crescent", "Gardens", "Terrace", "Square", "Mews")
_DE_STREET_SUFFIXES = ("straße", "strasse", "str.", "weg", "allee", "platz", "gasse", "ring")
_FR_STREET_TYPES = ("rue", "avenue", "boulevard", "place", "chemin", "allée", "impasse", "quai")
_ES_STREET_TYPES = ("Calle", "Avenida", "Plaza", "Paseo", "C/", "Camino")
_US_STATES = ("CA", "NY", "TX", "WA", "IL", "MA", "FL", "OR", "CO", "GA")
_TOWN_PREFIXES = ("North", "South", "East", "West", "New", "Lake", "Port", "Fort", "Mount", "Saint")
_TOWN_SUFFIXES = ("ville", "ton", "town", "burg", "berg", "borough", "bury", "field", "ford", "haven", "port", "mouth")


@dataclass(frozen=True)
class Sentence:
    text: str
    spans: list[tuple[int, int, str]]
    source: str


class _Filler:
    def __init__(self, rng: random.Random, held_out: bool) -> None:
        self.rng = rng
        part = "held_out" if held_out else "train"
        self.lists: dict[str, tuple[str, ...]] = {
            name: getattr(word_list(name), part)
            for name in ("first_names", "last_names", "cities", "countries", "org_names", "org_suffixes", "streets")
        }

    def pick(self, name: str) -> str:
        return self.rng.choice(self.lists[name])

    def person(self) -> str:
        first, last = self.pick("first_names"), self.pick("last_names")
        pick = self.pick
        return self.rng.choice(
            [
                f"{first} {last}",
                f"{first} {last}",
                first,
                f"{first[0]}. {last}",
                f"{first} {pick('first_names')} {last}",
                f"{first} {last}-{pick('last_names')}",
                f"{first} {pick('first_names')[0]}. {last}",
                f"{first} {last} {self.rng.choice(['Jr.', 'Sr.', 'III', 'PhD', 'MD'])}",
            ]
        )

    def place(self) -> str:
        # "Lyon, France" is two places, as the corpora label it; templates write "{L}, {l}" for that.
        return self.rng.choice([self.pick("cities"), self.pick("cities"), self.pick("countries"), self.town()])

    def town(self) -> str:
        """A made-up town of the shape real ones have ("Port Adaline", "Lake Kuhnberg", "East Ryanville"), so a
        place no list holds is read from its form and context."""
        rng, name = self.rng, self.rng.choice([self.pick("first_names"), self.pick("last_names")])
        prefix, suffix = rng.choice(_TOWN_PREFIXES), rng.choice(_TOWN_SUFFIXES)
        return rng.choice([f"{prefix} {name}", f"{name}{suffix}", f"{prefix} {name}{suffix}"])

    def organization(self) -> str:
        rng = self.rng
        last, suffix = self.pick("last_names"), self.pick("org_suffixes")
        return rng.choice(
            [
                self.pick("org_names"),
                self.pick("org_names"),
                f"{last} {suffix}",
                f"{last} & {self.pick('last_names')} {rng.choice(['LLP', 'GmbH', 'Partners', 'Ltd'])}",
                f"{self.pick('cities')} {rng.choice(['Logistics', 'Dental', 'Capital', 'Media'])} {suffix}",
                f"University of {self.pick('cities')}",
                f"{self.pick('streets')} {suffix}",
            ]
        )

    def address(self) -> str:
        rng = self.rng
        # Streets are named after trees and landmarks ("Oak") or people ("Kuhn Street"); towns may be made up.
        street = rng.choice([self.pick("streets"), self.pick("streets"), self.pick("last_names")])
        city = rng.choice([self.pick("cities"), self.pick("cities"), self.town()])
        number = str(rng.randint(1, 2400))
        return rng.choice(
            [
                f"{number} {street} {rng.choice(_US_STREET_TYPES)}, {city}, {rng.choice(_US_STATES)} "
                f"{rng.randint(10000, 99999)}",
                f"{number} {street} {rng.choice(_US_STREET_TYPES)}",
                f"{number} {street} {rng.choice(_US_STREET_TYPES)} {rng.choice(['Apt.', 'Suite', 'Unit'])} "
                f"{rng.randint(1, 999)}, {city}, {rng.choice(_US_STATES)} {rng.randint(10000, 99999)}",
                f"{rng.randint(1, 250)}{rng.choice(['', '', 'B'])} {street} {rng.choice(_UK_STREET_TYPES)}, {city} "
                f"{rng.choice('NSEWLMB')}{rng.choice('W1E2')}{rng.randint(1, 9)} {rng.randint(1, 9)}"
                f"{rng.choice('ABDHJX')}{rng.choice('ABQRTZ')}",
                f"{street}{rng.choice(_DE_STREET_SUFFIXES)} {rng.randint(1, 180)}, {rng.randint(10000, 99999)} {city}",
                f"{rng.randint(1, 120)} {rng.choice(_FR_STREET_TYPES)} de la {street}, {rng.randint(10000, 95999)} {city}",
                f"{rng.choice(_ES_STREET_TYPES)} de {street} {rng.randint(1, 200)}, {rng.randint(10000, 52999)} {city}",
            ]
        )


def _fill(template: str, filler: _Filler) -> tuple[str, list[tuple[int, int, str]]]:
    makers = {
        "P": (filler.person, PER),
        "p": (filler.person, PER),
        "L": (filler.place, LOC),
        "l": (filler.place, LOC),
        "O": (filler.organization, ORG),
        "A": (filler.address, LOC),
        "P_LAST": (lambda: filler.pick("last_names"), PER),
        "p_LAST": (lambda: filler.pick("last_names"), PER),
        "P_FIRST": (lambda: filler.pick("first_names"), PER),
        "p_FIRST": (lambda: filler.pick("first_names"), PER),
        "LB": (lambda: "{", None),  # literal braces, for JSON-like templates
        "RB": (lambda: "}", None),
    }
    text, spans, rest = "", [], template
    while "{" in rest:
        before, _, after = rest.partition("{")
        slot, _, rest = after.partition("}")
        text += before
        make, entity = makers[slot]
        value = make()
        if entity is not None:
            spans.append((len(text), len(text) + len(value), entity))
        text += value
    return text + rest, spans


def sentences(split: str, count: int, seed: int) -> list[Sentence]:
    held_out = split == "test"
    rng = random.Random(f"{seed}-{split}")
    filler = _Filler(rng, held_out)
    templates = [t for i, t in enumerate(TEMPLATES) if (i % 5 == 4) == held_out]
    negatives = [t for i, t in enumerate(NEGATIVES) if (i % 5 == 4) == held_out]
    out = []
    for i in range(count):
        if i % 8 == 7:
            out.append(Sentence(rng.choice(negatives), [], f"synthetic-{split}"))
            continue
        text, spans = _fill(rng.choice(templates), filler)
        out.append(Sentence(text, spans, f"synthetic-{split}"))
    return out
