"""Who ccscope says it is on the wire: one User-Agent for the crawler, robots.txt checks and the
measurement downloads, so a site operator sees one identity with a contact address."""

from ccscope import __version__

USER_AGENT = f"ccscope/{__version__} (+https://github.com/ccscope/ccscope; congestion-control census)"
# The product token robots.txt rules are matched against (RFC 9309 section 2.2.1).
ROBOTS_AGENT = "ccscope"
