"""The crawler: ranked site lists, robots.txt, and each site's largest object worth downloading.

It finds what to measure and never measures; its per-site cache lives in the store.
"""
