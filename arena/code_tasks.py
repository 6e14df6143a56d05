"""The programming tasks the live battle page suggests in Code mode when the pool holds no
prompt of the code category: each asks for code that runs in the visitor's browser (Python in
Pyodide, or one HTML page), so both answers can be run before the vote."""

from django.utils.translation import gettext

from arena.errors import ArenaError, ErrorCode

CODE_TASKS = (
    "Write a Python function that returns the first n prime numbers, and print the first 15.",
    "Write Python code that prints a multiplication table from 1 to 9, aligned in columns.",
    "In Python, parse the CSV text 'name,score\\nada,91\\nalan,87\\ngrace,95' with the csv "
    "module and print the names sorted by score, highest first.",
    "Write a Python function that checks whether a string is a palindrome, ignoring case and "
    "punctuation, and print the result for five examples.",
    "Make a single HTML page (inline CSS and JavaScript, no external files) with a button that "
    "counts its clicks and a reset button.",
    "Make a single HTML page with inline CSS and JavaScript that draws an analogue clock on a "
    "canvas and keeps it ticking.",
    "Make a single HTML page with a to-do list: type an item, press Enter to add it, click an "
    "item to strike it through. Inline CSS and JavaScript only.",
    "Write JavaScript that prints the first 20 Fibonacci numbers with console.log.",
)

# The suggestion categories the page may ask for ("": any pool prompt), and the pool prompt
# categories each one takes.
SUGGESTION_CATEGORIES = {"": (), "code": ("code", "coding")}


def suggestion_category(value: object) -> str:
    """The suggestion category a page asked for; anything else is refused, naming the field."""
    if not isinstance(value, str) or value not in SUGGESTION_CATEGORIES:
        raise ArenaError(
            ErrorCode.INVALID, gettext("category must be code, or left out."), field="category"
        )
    return value
