"""Text games for LLM agents (:class:`marl.text.TextEnv`): iterated social dilemmas,
Trust-and-Split and OpenSpiel games. One file per game family."""
