"""Editing the task's repository: search/replace blocks (``blocks``: the principal's reply, and the agents'
```edit block) and the agents' file editor (``editor``: view, create, str_replace, insert, undo_edit)."""
