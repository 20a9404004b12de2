"""The one exception the service raises for a refused request; ``status`` is the HTTP status to answer with."""


class AgentError(Exception):
    def __init__(self, status: int, message: str) -> None:
        Exception.__init__(self, message)
        self.status = status
