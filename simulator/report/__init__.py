"""Rendering results: rich tables, JSON/CSV files, plots and Chrome traces."""
