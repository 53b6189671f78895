"""The embedded store's names where older code imports them: the state directory's files
live in minidock.store.directory, the SQLite database in minidock.store.sqlite (their one
home). Nothing is defined here."""

from __future__ import annotations

from minidock.store.directory import (
    CONTROLLER_ID_NAME,
    DB_NAME,
    ENV_STATE,
    LOCK_NAME,
    Locked,
    StateError,
    StateLock,
    check_state_dir,
    controller_id,
    ensure_state_dir,
    state_dir,
)
from minidock.store.sqlite import SCHEMA_VERSION
from minidock.store.sqlite import SQLiteStore as Store

__all__ = [
    "CONTROLLER_ID_NAME",
    "DB_NAME",
    "ENV_STATE",
    "LOCK_NAME",
    "SCHEMA_VERSION",
    "Locked",
    "StateError",
    "StateLock",
    "Store",
    "check_state_dir",
    "controller_id",
    "ensure_state_dir",
    "state_dir",
]
