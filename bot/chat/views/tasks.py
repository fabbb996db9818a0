"""How tasks look in chat: the capture receipt, the lists (``/next`` grouped by context label),
the weekly review, and their buttons. Callback data is signed (bot/chat/callbacks.py):

- ``task:<id>:<action>.<state>``: triage or change one task, shown in that state
  (bot/chat/views/task_buttons.py);
- ``assign:<id>:<agent>``: give the task to that agent;
- ``page:<view>:<n>``: page ``n`` of a list (``next``, ``inbox``, ``waiting``, ``someday``);
- ``find:<words>:<n>``: page ``n`` of a search, its words joined by ``+``.
"""

from __future__ import annotations

from typing import Any

from bot.chat.callbacks import MAX_CALLBACK_BYTES, CallbackSigner
from bot.chat.text import Html, clip, html, visible
from bot.chat.views.task_buttons import ASSIGN_KIND, CHOICES, WHERE, Choice, button, list_row
from bot.tasks.task import Captured, Page, State, Task, group_by_label
from bot.timeutil import short_time

PAGE_KIND = "page"
FIND_KIND = "find"
LISTS = {
    "next": State.NEXT,
    "inbox": State.INBOX,
    "waiting": State.WAITING,
    "someday": State.SOMEDAY,
}
LIST_TITLES = {
    "next": "What you can do now (@next)",
    "inbox": "Inbox: not triaged yet",
    "waiting": "Waiting on someone (@waiting)",
    "someday": "Someday, maybe (@someday)",
}
EMPTY = {
    "next": "Nothing in @next. /inbox shows what waits for triage.",
    "inbox": "The inbox is empty. Forward me anything to capture it.",
    "waiting": "Nothing is @waiting.",
    "someday": "Nothing in @someday.",
}
BUTTONS_PER_PAGE = 5  # tasks with their own row of buttons, on one page
COMMENT_CHARS = 600  # each comment shown by /task; five of them fit one message


def captured_text(captured: Captured) -> Html:
    task = captured.task
    if captured.new:
        whose = f" for {task.assignee}" if task.assignee else ""
        return html("<b>Captured as task {}</b>{}: {}\n{}", task.id, whose, _title(task), WHERE)
    return html(
        "<b>Already captured as task {}</b> ({}): {}", task.id, task.describe_state(), _title(task)
    )


def triage_markup(signer: CallbackSigner, task_id: int) -> dict[str, Any]:
    """The receipt's buttons: where an inbox task goes."""
    rows = [
        [button(signer, task_id, Choice(action, State.INBOX), numbered=False) for action in row]
        for row in CHOICES[State.INBOX]
    ]
    return {"inline_keyboard": rows}


def task_line(task: Task) -> str:
    extras = []
    if task.labels:
        extras.append(" ".join(f"#{label}" for label in task.labels))
    if task.assignee:
        extras.append(f"→ {task.assignee}")
    tail = f"  ({'; '.join(extras)})" if extras else ""
    return f"{task.id}. {_title(task)}{tail}"


def list_view(signer: CallbackSigner, view: str, page: Page) -> tuple[str, dict[str, Any] | None]:
    """A page of one list, with buttons for its first tasks and to turn the page."""
    if page.total == 0:
        return EMPTY[view], None
    title = LIST_TITLES[view]
    lines = [html("<b>{}</b>: {} {}", title, page.shown_total(), _tasks(page.total)), ""]
    if view == "next":
        for label, grouped in group_by_label(page.tasks).items():
            lines.append(f"#{label}")
            lines += [f"  {task_line(task)}" for task in grouped]
    else:
        lines += [task_line(task) for task in page.tasks]
    lines += _page_footer(page)
    rows = [list_row(signer, task) for task in page.tasks[:BUTTONS_PER_PAGE]]
    rows += _pager(signer, PAGE_KIND, view, page)
    return Html("\n").join(lines), {"inline_keyboard": rows} if rows else None


def found_view(
    signer: CallbackSigner, query_words: list[str], page: Page
) -> tuple[str, dict[str, Any] | None]:
    shown = " ".join(query_words)
    if page.total == 0:
        return f"No task holds {shown!r}.", None
    lines = [html("<b>Tasks with {}</b>: {}", repr(shown), page.shown_total()), ""]
    lines += [f"{task_line(task)}  [{task.describe_state()}]" for task in page.tasks]
    lines += _page_footer(page)
    key = "+".join(query_words)
    rows = []
    if _fits(FIND_KIND, key):
        rows = _pager(signer, FIND_KIND, key, page)
    elif page.has_next:
        lines.append("Add words to narrow the search; these words are too long to page.")
    return Html("\n").join(lines), {"inline_keyboard": rows} if rows else None


def task_detail(task: Task, comments: list[str] | None = None) -> Html:
    lines = [html("<b>Task {}</b> [{}]: {}", task.id, task.describe_state(), _title(task))]
    if task.body and task.body != task.title:
        lines += ["", visible(task.body)]
    facts = [f"captured {short_time(task.created_at)}"]
    if task.origin_kind != "self" and task.origin_name:
        facts.append(f"from {visible(task.origin_name)}")
    if task.origin_link:
        facts.append(task.origin_link)
    if task.labels:
        facts.append(" ".join(f"#{label}" for label in task.labels))
    if task.assignee:
        facts.append(f"assigned to {task.assignee}")
    files = [a for a in task.attachments if a.get("kind") not in ("text", "link")]
    if files:
        facts.append(f"{len(files)} attachment{'s' if len(files) != 1 else ''}")
    lines += ["", "; ".join(facts)]
    if comments:
        lines += [
            "",
            "Latest comments:",
            *(f"- {visible(clip(c, COMMENT_CHARS))}" for c in comments),
        ]
    return Html("\n").join(lines)


def review_view(
    signer: CallbackSigner, someday: Page, waiting: Page
) -> tuple[str, dict[str, Any] | None]:
    """The weekly review: ``@someday`` resurfaced, ``@waiting`` older than a week listed."""
    lines = ["Weekly review", ""]
    lines += _review_section(
        someday, "someday", "Someday, maybe: {}. Is any of these for now?", "Nothing in @someday."
    )
    lines.append("")
    lines += _review_section(
        waiting,
        "waiting",
        "Waiting for over a week: {}. Time to chase them?",
        "Nothing has waited for over a week.",
    )
    rows = [
        [button(signer, task.id, Choice("next", State.SOMEDAY), numbered=True)]
        for task in someday.tasks[:BUTTONS_PER_PAGE]
    ]
    rows += [
        [button(signer, task.id, Choice("done", State.WAITING), numbered=True)]
        for task in waiting.tasks[:BUTTONS_PER_PAGE]
    ]
    return Html("\n").join(lines), {"inline_keyboard": rows} if rows else None


def _review_section(page: Page, view: str, heading: str, empty: str) -> list[str]:
    if not page.total:
        return [empty]
    lines = [heading.format(page.shown_total()), *(f"  {task_line(t)}" for t in page.tasks)]
    if page.has_next:
        more = page.total - len(page.tasks)
        lines.append(f"  … and {more}{'' if page.counted_all else '+'} more: /{view}")
    return lines


def assign_markup(signer: CallbackSigner, task_id: int, agents: list[str]) -> dict[str, Any]:
    rows = [
        [_button(signer, ASSIGN_KIND, str(task_id), slug, slug)]
        for slug in agents
        if _fits(ASSIGN_KIND, f"{task_id}:{slug}")
    ]
    return {"inline_keyboard": rows}


def _pager(signer: CallbackSigner, kind: str, what: str, page: Page) -> list[list[dict]]:
    row = []
    if page.number > 0:
        row.append(_button(signer, kind, what, str(page.number - 1), "‹ Previous"))
    if page.has_next:
        row.append(_button(signer, kind, what, str(page.number + 1), "Next ›"))
    return [row] if row else []


def _page_footer(page: Page) -> list[str]:
    if page.pages == 1:
        return []
    return ["", f"Page {page.number + 1} of {page.shown_pages()}"]


def _button(signer: CallbackSigner, kind: str, id: str, choice: str, text: str) -> dict:
    return {"text": text, "callback_data": signer.sign(kind, id, choice)}


def _fits(kind: str, body: str) -> bool:
    # kind, body, a page number of up to 6 digits, the mac and the separators
    return len(f"{kind}:{body}:999999:0123456789".encode()) <= MAX_CALLBACK_BYTES


def _title(task: Task) -> str:
    return visible(task.title)


def _tasks(count: int) -> str:
    return "task" if count == 1 else "tasks"
