"""The imported gazetteers in the package are exactly what `python -m guardrails.ner.import_lists` makes from the
pinned packages of the `ner-lists` extra: the shipped lists are reproducible from the repository."""

from guardrails.ner import import_lists
from guardrails.ner.lists import IMPORTED_DIR, IMPORTED_LISTS


def test_the_shipped_lists_are_what_the_import_script_makes(tmp_path):
    assert import_lists.main(["--out", str(tmp_path)]) == 0
    for name in IMPORTED_LISTS:
        made = (tmp_path / f"{name}.txt").read_text(encoding="utf-8")
        assert made == (IMPORTED_DIR / f"{name}.txt").read_text(encoding="utf-8"), name


def test_only_capitalized_latin_script_entries_are_kept():
    assert import_lists._latin("José-María") and import_lists._latin("O'Brien")
    assert (
        not import_lists._latin("Москва")
        and not import_lists._latin("東京")
        and not import_lists._latin("les Escaldes")
    )
