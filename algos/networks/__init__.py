"""Agent networks and mixers of marl's algorithms.

``base`` (the :class:`~marl.algos.networks.base.AgentNetwork` protocol, the shared GRU
unroll), ``registry`` (networks by name: the ``agent`` config key), ``mlp`` (MAPPO's
actor), ``rnn`` (pymarl's RNN agent), ``entity`` / ``hpn`` / ``asn`` (entity-aware
networks) and ``mixers`` (QMIX). See ``docs/algorithms/entity_networks.md``.
"""
