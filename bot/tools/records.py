"""The owner's records as agents read and change them: tasks, notes, and runs.

Reads (``tasks.list``, ``tasks.get``, ``notes.search``, ``runs.list``, ``runs.status``) answer at
once; every change (``tasks.create``, ``tasks.update``, ``tasks.comment``, ``tasks.complete``,
``notes.add``, ``runs.start``) is a write, so it waits for the owner's tap. Each answer is plain
JSON with only what an agent needs, and a list says how many there are beyond what it shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.errors import RunRefused, TaskRefused, ToolRefused
from bot.tasks.notes import NoteKind, add_note
from bot.tasks.task import Closed, State, Task, parse_label

if TYPE_CHECKING:
    from bot.actions.call import Caller, ToolFunction
    from bot.core import Platform


def task_summary(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "title": task.title,
        "state": task.describe_state(),
        "labels": list(task.labels),
        "assignee": task.assignee,
    }


def task_detail(task: Task, comments: list[str]) -> dict[str, Any]:
    return {
        **task_summary(task),
        "body": task.body,
        "origin": {"kind": task.origin_kind, "name": task.origin_name, "link": task.origin_link},
        "created_at": task.created_at.isoformat(timespec="seconds"),
        "updated_at": task.updated_at.isoformat(timespec="seconds"),
        "closed": task.closed_as.value if task.closed_as else None,
        "comments": comments,
    }


def _labels(raw: list[str]) -> list[str]:
    try:
        return [parse_label(label) for label in raw]
    except TaskRefused as exc:
        raise ToolRefused(str(exc)) from None


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    tasks, notes, runs = platform.tasks, platform.notes, platform.runs

    async def list_tasks(args: dict, caller: Caller) -> dict:
        limit, page = args.get("limit", 20), args.get("page", 0)
        if "query" in args:
            found = await tasks.find(args["query"], page=page, size=limit)
        else:
            found = await tasks.in_state(
                State(args.get("state", State.NEXT)), page=page, size=limit
            )
        return {
            "tasks": [task_summary(task) for task in found.tasks],
            "total": found.shown_total(),
            "page": page,
            "more": found.has_next,
        }

    async def get_task(args: dict, caller: Caller) -> dict:
        task = await tasks.get(args["id"])
        if task is None:
            raise ToolRefused(f"there is no task {args['id']}")
        return task_detail(task, await tasks.comments(task.id, limit=20))

    async def create_task(args: dict, caller: Caller) -> dict:
        task = await tasks.create(
            args["title"],
            args.get("body", ""),
            by_agent=caller.agent,
            state=State(args.get("state", State.INBOX)),
            labels=tuple(_labels(args.get("labels", []))),
        )
        return task_summary(task)

    async def update_task(args: dict, caller: Caller) -> dict:
        task_id = args["id"]
        try:
            if "state" in args:
                await tasks.move(task_id, State(args["state"]), f"agent {caller.agent}")
            if args.get("add_labels") or args.get("remove_labels"):
                add, remove = _labels(args.get("add_labels", [])), args.get("remove_labels", [])
                await tasks.relabel(task_id, add, remove)
            if "assignee" in args:
                assignee = args["assignee"]
                if assignee is not None and assignee not in platform.catalog.agents:
                    raise ToolRefused(f"no agent is called {assignee!r}")
                await tasks.assign(task_id, assignee)
        except TaskRefused as exc:
            raise ToolRefused(str(exc)) from None
        task = await tasks.get(task_id)
        if task is None:
            raise ToolRefused(f"there is no task {task_id}")
        return task_summary(task)

    async def comment_task(args: dict, caller: Caller) -> dict:
        task = await tasks.get(args["id"])
        if task is None:
            raise ToolRefused(f"there is no task {args['id']}")
        note_id = await tasks.comment(task.id, args["text"], agent=caller.agent)
        return {"task": task.id, "comment": note_id}

    async def complete_task(args: dict, caller: Caller) -> dict:
        try:
            task = await tasks.close(args["id"], Closed.DONE)
        except TaskRefused as exc:
            raise ToolRefused(str(exc)) from None
        if args.get("comment"):
            await tasks.comment(task.id, args["comment"], agent=caller.agent)
        return task_summary(task)

    async def search_notes(args: dict, caller: Caller) -> dict:
        found, total = await notes.search(args["query"], limit=args.get("limit", 10))
        return {
            "notes": [
                {
                    "id": note.id,
                    "kind": note.kind.value,
                    "text": note.text,
                    "agent": note.agent,
                    "task": note.task_id,
                    "created_at": note.created_at.isoformat(timespec="seconds"),
                }
                for note in found
            ],
            "total": total,
        }

    async def add_a_note(args: dict, caller: Caller) -> dict:
        task_id = args.get("task_id")
        if task_id is not None and await tasks.get(task_id) is None:
            raise ToolRefused(f"there is no task {task_id}")
        async with notes.store.write() as conn:
            note_id = await add_note(
                conn, NoteKind.MEMO, args["text"], agent=caller.agent, task_id=task_id
            )
        return {"note": note_id}

    async def list_runs(args: dict, caller: Caller) -> dict:
        found = await runs.recent(limit=args.get("limit", 10), agent=args.get("agent"))
        return {"runs": [_run_summary(run) for run in found]}

    async def run_status(args: dict, caller: Caller) -> dict:
        run = await runs.get(args["id"])
        if run is None:
            raise ToolRefused(f"there is no run {args['id']}")
        return {
            **_run_summary(run),
            "request": run.request,
            "effects": run.effects,
            "result": run.result,
            "error": run.error,
        }

    async def start_run(args: dict, caller: Caller) -> dict:
        try:
            run = await platform.start_run(args["agent"], args["request"], caller.chat_id)
        except RunRefused as exc:
            raise ToolRefused(str(exc)) from None
        return {"run": run.id, "agent": run.agent, "state": run.status.value}

    return {
        "tasks.list": list_tasks,
        "tasks.get": get_task,
        "tasks.create": create_task,
        "tasks.update": update_task,
        "tasks.comment": comment_task,
        "tasks.complete": complete_task,
        "notes.search": search_notes,
        "notes.add": add_a_note,
        "runs.list": list_runs,
        "runs.status": run_status,
        "runs.start": start_run,
    }


def _run_summary(run) -> dict[str, Any]:
    return {
        "id": run.id,
        "agent": run.agent,
        "state": run.status.value,
        "step": run.step,
        "created_at": run.created_at.isoformat(timespec="seconds"),
        "task": run.task_id,
    }
