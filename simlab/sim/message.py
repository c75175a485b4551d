"""What the simulator says, in a form another layer can translate: `Message`.

sim/ never translates (it does not import `simlab.i18n`): a sentence it builds for a learner is a `Message`, English
text that also keeps its template and the fields it was formatted with. Used as a string, a Message *is* its English
(equality, hashing, JSON, the CLI, every English test see plain text, byte for byte). The layer that prints it —
render/, grading/, a notebook — passes it to `simlab.i18n._`, which translates the template and formats the fields,
each said the same way when it is itself a Message.

    >>> m = Message("rank {r} is stuck at step {i}", r=1, i=2)
    >>> m, m.template, m.fields
    ('rank 1 is stuck at step 2', 'rank {r} is stuck at step {i}', {'r': 1, 'i': 2})
    >>> lines = Message.lines([m, "  [0 1]  [2 3]"])   # several lines, each translated where it is a Message
    >>> print(lines)
    rank 1 is stuck at step 2
      [0 1]  [2 3]

`tests/test_i18n.py` collects every `Message("…")` with a literal template, as it collects `_("…")`: each needs a
Chinese entry in the lesson's .po with the same fields.
"""
from __future__ import annotations


class Message(str):
    """English text formatted from `template` with `fields`, which keeps both so it can be said in another
    language (`simlab.i18n._(message)`). A field may itself be a Message (translated in turn) or any value."""

    def __new__(cls, template: str, **fields):
        self = super().__new__(cls, template.format(**fields))
        self.template, self.fields = template, fields
        return self

    def __reduce__(self):  # pickled (a worker's result) as template and fields, not as its English alone
        return (_rebuild, (self.template, self.fields))

    @classmethod
    def joined(cls, parts, separator: str = "") -> Message:
        """`parts` (Messages or plain text) joined by `separator`, as one Message: its template is only the
        separators (no catalog has it, so it stays), each part a field, said where it is a Message."""
        parts = list(parts)
        template = separator.replace("{", "{{").replace("}", "}}").join(f"{{p{i}}}" for i in range(len(parts)))
        return cls(template, **{f"p{i}": part for i, part in enumerate(parts)})

    @classmethod
    def lines(cls, parts) -> Message:
        """`parts` as lines of one Message: a table's rows stay as they are, its sentences are said."""
        return cls.joined(parts, "\n")

    @staticmethod
    def listing(items, and_last: bool = False) -> str:
        """'x, y, z' ('x, y and z' with `and_last`), each separator a Message (a translation may write '、' and
        '和'); one item as it is, none ""."""
        items = list(items)
        head = items[0] if items else ""
        for i, item in enumerate(items[1:], 2):
            head = (Message("{head} and {item}", head=head, item=item) if and_last and i == len(items)
                    else Message("{head}, {item}", head=head, item=item))
        return head

    @staticmethod
    def series(items) -> str:
        """'x, y and z'."""
        return Message.listing(items, and_last=True)


def _rebuild(template: str, fields: dict) -> Message:
    return Message(template, **fields)
