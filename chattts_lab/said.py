"""A sentence the library writes for people, kept with its template and values so an interface can say it in another
language (webui/i18n/texts.py renders them in Chinese) while the command line, reports and the history keep
the English text.

`Said` is a `str` (the English sentence), so every caller that prints, joins, stores or compares it works as
before; what it adds is `template` (the English with `{name}` fields) and `params` (the values, which may be
`Said` themselves). Any `str` operation returns a plain `str`: a sentence meant to be translated must stay whole
(build it with `Said(...)`, `Said.joined` or `capitalized`), not be sliced or glued with `+`.
"""

from __future__ import annotations

from typing import Iterable


class Said(str):
    template: str
    params: dict

    def __new__(cls, template: str, /, **params) -> "Said":
        return cls._of(template.format(**params) if params else template, template, params)

    @classmethod
    def _of(cls, text: str, template: str, params: dict) -> "Said":
        said = super().__new__(cls, text)
        said.template, said.params = template, params
        return said

    def __reduce__(self):  # pickled (a sweep's events may cross processes) with its template and values
        return Said._of, (str(self), self.template, self.params)

    def capitalized(self) -> "Said":
        """The sentence opening a line (its first letter upper case); a translation keeps its own."""
        return Said._of(self[:1].upper() + self[1:], self.template, self.params)

    @classmethod
    def joined(cls, parts: Iterable[str], sep: str = " ") -> "Said":
        """Sentences one after another (empty ones left out), each still translatable."""
        fields = {f"part{i}": part for i, part in enumerate(p for p in parts if p)}
        return cls(sep.join("{%s}" % name for name in fields), **fields)
