"""Test support shared by several test packages (a real fake model server, …)."""
