"""The console's form for a bootstrap file (IDENTITY.md, FERMIX.md, SOUL.md, REALTIME.md)."""

from __future__ import annotations

from django import forms

from resources.catalog import check_content
from resources.errors import InvalidContent


class BootstrapEditForm(forms.Form):
    """The new text of a bootstrap file, the revision it was written against and the text last previewed."""

    content = forms.CharField(required=False, strip=False, label="Content",
                              widget=forms.Textarea(attrs={"rows": 28, "cols": 110, "spellcheck": "false",
                                                           "class": "fermix-editor"}))
    reason = forms.CharField(required=False, max_length=2000, label="Note",
                             help_text="Optional; kept in the revision's provenance.")
    base_revision = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    previewed = forms.CharField(required=False, widget=forms.HiddenInput)  # content_hash of the previewed text

    def clean_content(self) -> str:
        # Browsers send a text area's line breaks as CRLF; the files are written with LF.
        content = self.cleaned_data["content"].replace("\r\n", "\n")
        try:
            return check_content(content)
        except InvalidContent as exc:
            raise forms.ValidationError(exc.message) from None

    def clean_reason(self) -> str:
        return self.cleaned_data["reason"].strip()
