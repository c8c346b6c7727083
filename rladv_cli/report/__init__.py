"""The run report: its pydantic model, statistics gathered while data flows, the replay of the input's
own columns, the published JSON Schemas, and the HTML page with its charts.
"""
