"""Widgets the screens compose: plots, tables, the strategy map, the Gantt chart."""
