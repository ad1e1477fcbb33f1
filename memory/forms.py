"""The console's forms for memory rows: add one, correct one. Admission decides; these only collect."""

from __future__ import annotations

from django import forms

from memory.models import Category
from memory.rows import MAX_VALUE_CHARS

# Room for admission to refuse a long value with its own message (the 200-character rule) instead of
# the browser cutting the text silently.
INPUT_CHARS = 2000
VALUE_HELP = (f"One concise fact, at most {MAX_VALUE_CHARS} characters (admission refuses a longer one).")
REASON_HELP = "Kept in the row's history with your name."

# Which field an admission refusal is about, by its code; any other refusal is about the whole form.
FIELD_OF_CODE = {
    "invalid_value": "value", "value_too_long": "value", "invalid_key": "key", "invalid_category": "category",
    "trust_gate": "category", "scope_change": "category", "invalid_agent": "agent_id", "invalid_owner": "owner_id",
}


def _textarea(rows: int) -> forms.Textarea:
    return forms.Textarea(attrs={"rows": rows, "cols": 80})


class MemoryAddForm(forms.Form):
    agent_id = forms.ChoiceField(label="Agent")
    owner_id = forms.CharField(label="Owner", max_length=200,
                               help_text="Whose row; user-profile categories are stored in this owner's scope.")
    key = forms.CharField(max_length=INPUT_CHARS, help_text="A short stable name, e.g. home_city; a live row with "
                                                            "this key in the same scope is replaced.")
    value = forms.CharField(max_length=INPUT_CHARS, widget=_textarea(3), help_text=VALUE_HELP)
    category = forms.ChoiceField(choices=Category.choices)
    reason = forms.CharField(max_length=INPUT_CHARS, widget=_textarea(2), help_text=REASON_HELP)

    def __init__(self, *args, agents: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent_id"].choices = [(a, a) for a in agents]


class MemoryCorrectForm(forms.Form):
    value = forms.CharField(max_length=INPUT_CHARS, widget=_textarea(3), help_text=VALUE_HELP)
    category = forms.ChoiceField(choices=Category.choices,
                                 help_text="Within the row's scope: a user-profile category cannot become context "
                                           "or a directive (archive the row and add a new one).")
    reason = forms.CharField(max_length=INPUT_CHARS, widget=_textarea(2), help_text=REASON_HELP)


def add_refusal(form: forms.Form, exc) -> None:
    """Show an admission refusal (a MemoryRowError) on the field it is about, with its code."""
    field = FIELD_OF_CODE.get(exc.code)
    form.add_error(field if field in form.fields else None, f"{exc} ({exc.code})")
