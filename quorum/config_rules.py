"""The rules of a node configuration that involve more than one key, or more than a key's own
syntax: a controller is a voter, listener names refer to listeners, ports do not collide, the
security keys fit together. ``validate`` runs on every ``NodeConfig`` constructed, after each
key's own check (``Kind.check`` in ``quorum/config_keys.py``); the first rule broken is the
``ConfigError`` raised, naming the key and what is allowed."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from quorum.config_types import (
    CLIENT_AUTH_VALUES,
    ROLES,
    SASL_PROTOCOLS,
    SECURITY_PROTOCOLS,
    ConfigError,
    HostPort,
    Listener,
)
from quorum.config_values import LISTENER_NAME_RE, check_int, check_port, is_wildcard
from quorum.ids import RESERVED_UUIDS
from quorum.limits import INT32_MAX

if TYPE_CHECKING:
    from quorum.config_keys import NodeConfig


def validate(config: NodeConfig) -> None:
    if not config.process_roles:
        raise ConfigError(
            "process.roles is empty; allowed: 'controller', 'broker', or both",
            key="process.roles",
        )
    unknown_roles = sorted(config.process_roles - ROLES)
    if unknown_roles:
        raise ConfigError(
            f"process.roles: {', '.join(map(repr, unknown_roles))} is not a role; "
            "allowed: 'controller', 'broker', or both",
            key="process.roles",
        )

    voters = config.controller_quorum_voters
    bootstrap = config.controller_quorum_bootstrap_servers
    if not voters and not bootstrap:
        raise ConfigError(
            "controller.quorum.voters is empty; give every controller as id@host:port, "
            "e.g. ['1@127.0.0.1:9093'], or give controller.quorum.bootstrap.servers "
            "(host:port each) for a quorum whose voters are in the log (KIP-853)",
            key="controller.quorum.voters",
        )
    for address in bootstrap:
        check_port("controller.quorum.bootstrap.servers", address.port, minimum=1)
    for voter_id, address in voters.items():
        check_int("controller.quorum.voters", voter_id, minimum=0, maximum=INT32_MAX)
        check_port("controller.quorum.voters", address.port, minimum=1)
    addresses = [str(address) for address in voters.values()]
    shared = sorted({a for a in addresses if addresses.count(a) > 1})
    if shared:
        raise ConfigError(
            f"controller.quorum.voters: two voters share the address {shared[0]}; each voter "
            "needs its own host:port",
            key="controller.quorum.voters",
        )
    voter_list = _format_voters(voters)
    if config.is_controller and voters and config.node_id not in voters:
        raise ConfigError(
            f"node.id {config.node_id} is not among controller.quorum.voters ({voter_list}); "
            "a node whose process.roles includes 'controller' must be one of the voters: fix "
            "node.id or add the node to controller.quorum.voters",
            key="node.id",
        )
    if not config.is_controller and config.node_id in voters:
        raise ConfigError(
            f"node.id {config.node_id} is among controller.quorum.voters ({voter_list}) but "
            "process.roles has no 'controller'; a broker-only node must not be a voter: give it "
            "another node.id or add 'controller' to process.roles",
            key="node.id",
        )

    _validate_listeners(config)

    if config.is_broker and not config.log_dirs:
        raise ConfigError(
            "log.dirs is required when process.roles includes 'broker': give the directories "
            "that hold the broker's partitions, e.g. ['/var/lib/metaquorum/data']",
            key="log.dirs",
        )
    duplicates = sorted({str(d) for d in config.log_dirs if config.log_dirs.count(d) > 1})
    if duplicates:
        raise ConfigError(
            f"log.dirs: {', '.join(duplicates)} is listed more than once; each directory may "
            "appear once",
            key="log.dirs",
        )

    if config.cluster_id is not None and config.cluster_id in RESERVED_UUIDS:
        raise ConfigError(
            f"cluster.id: {config.cluster_id} is reserved; allowed: any other id, e.g. one from "
            "`metaquorum storage random-uuid`",
            key="cluster.id",
        )

    _validate_security(config)
    _validate_side_listeners(config)

    for host, limit in config.max_connections_per_ip_overrides.items():
        check_int(f"max.connections.per.ip.overrides ({host})", limit, minimum=0, maximum=INT32_MAX)
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError(
            "max.connections.per.ip is 0 but max.connections.per.ip.overrides names no host, so "
            "no client could connect to a Kafka listener; allowed: 0 only with overrides "
            "(Kafka's rule), else at least 1",
            key="max.connections.per.ip",
        )

    if config.broker_session_timeout_ms <= config.broker_heartbeat_interval_ms:
        raise ConfigError(
            f"broker.session.timeout.ms ({config.broker_session_timeout_ms}) must be greater "
            f"than broker.heartbeat.interval.ms ({config.broker_heartbeat_interval_ms}), or a "
            "healthy broker is fenced between two heartbeats",
            key="broker.session.timeout.ms",
        )
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise ConfigError(
            f"group.min.session.timeout.ms ({config.group_min_session_timeout_ms}) is greater "
            f"than group.max.session.timeout.ms ({config.group_max_session_timeout_ms}): no "
            "consumer could join a group",
            key="group.min.session.timeout.ms",
        )


def _validate_listeners(config: NodeConfig) -> None:
    """``listeners`` and Kafka's keys that name listeners (see the module docstring)."""
    if not config.listeners:
        raise ConfigError(
            "listeners is empty; give this node's gRPC address, e.g. 'CONTROLLER://127.0.0.1:9093'",
            key="listeners",
        )
    names = [listener.name for listener in config.listeners]
    for listener in (*config.listeners, *config.advertised_listeners):
        key = "listeners" if listener in config.listeners else "advertised.listeners"
        if not LISTENER_NAME_RE.fullmatch(listener.name):
            raise ConfigError(
                f"{key}: {listener.name!r} is not a listener name; allowed: letters, digits "
                "and '_', not starting with a digit, e.g. 'CONTROLLER'",
                key=key,
            )
        check_port(key, listener.port, minimum=0 if key == "listeners" else 1)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(
            f"listeners: the listener name {repeated[0]} is used twice; each listener needs its "
            "own name",
            key="listeners",
        )
    listed = ", ".join(str(listener) for listener in config.listeners)
    controller_names = config.controller_listener_names
    if (
        config.is_controller
        and controller_names
        and not any(name in names for name in controller_names)
    ):
        raise ConfigError(
            f"controller.listener.names ({', '.join(controller_names)}) names none of the "
            f"listeners ({listed}); a controller serves the first of them that is in "
            "listeners: add it there, or fix the name",
            key="controller.listener.names",
        )
    if not config.is_controller:
        own = sorted(set(controller_names) & set(names))
        if own:
            raise ConfigError(
                f"controller.listener.names names {', '.join(own)}, a listener of this "
                "broker-only node; in KRaft a broker must not listen on a controller listener "
                "(Kafka's rule): remove it from listeners",
                key="controller.listener.names",
            )
    if (
        config.inter_broker_listener_name is not None
        and config.is_broker
        and config.inter_broker_listener_name not in names
    ):
        raise ConfigError(
            f"inter.broker.listener.name {config.inter_broker_listener_name!r} is not a "
            f"listener of this node ({listed}); allowed: one of {', '.join(names)}",
            key="inter.broker.listener.name",
        )
    ports = [listener.port for listener in config.listeners if listener.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError(
            f"listeners: two listeners share a port ({listed}); each needs its own",
            key="listeners",
        )
    for advertised in config.advertised_listeners:
        if advertised.name not in names:
            raise ConfigError(
                f"advertised.listeners: {advertised.name!r} is not one of this node's listeners "
                f"({listed}); advertise only listeners it has",
                key="advertised.listeners",
            )
    for advertised in config.advertised_listeners:
        if is_wildcard(advertised.host):
            raise ConfigError(
                f"advertised.listeners: {advertised} is not an address others can reach; give "
                "the host name or IP address clients should use",
                key="advertised.listeners",
            )
    if config.is_broker and is_wildcard(config.advertised_listener.host):
        raise ConfigError(
            f"listeners: {config.listener} listens on every interface, so the broker needs the "
            f"address to register: add {config.listener.name}://<host>:{config.listener.port} "
            f"to advertised.listeners, or write {config.listener.name}://:"
            f"{config.listener.port} to register this machine's host name (Kafka's rule)",
            key="advertised.listeners",
        )


def _validate_security(config: NodeConfig) -> None:
    """The values of the ssl.* keys; whether an SSL listener has its files is checked at
    start-up (quorum/security/tls.py), so `storage format` needs no certificates."""
    for name, protocol in config.listener_security_protocol_map.items():
        if not LISTENER_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"listener.security.protocol.map: {name!r} is not a listener name; allowed: "
                "letters, digits and '_', e.g. 'CONTROLLER:SSL'",
                key="listener.security.protocol.map",
            )
        served = name == config.listener.name
        if protocol not in SECURITY_PROTOCOLS and (served or protocol not in SASL_PROTOCOLS):
            raise ConfigError(
                f"listener.security.protocol.map: {name}:{protocol} is not supported"
                f"{' for the listener this node serves' if served else ''}; allowed "
                f"protocols: {', '.join(SECURITY_PROTOCOLS)} (SASL is not supported)",
                key="listener.security.protocol.map",
            )
    stores = (
        ("ssl.keystore.type", config.ssl_keystore_type),
        ("ssl.truststore.type", config.ssl_truststore_type),
    )
    for key, value in stores:
        if value != "PEM":
            raise ConfigError(
                f"{key}: {value!r} is not supported; allowed: 'PEM' (a JKS or PKCS12 store "
                "converts with keytool or openssl; `metaquorum dev certs` writes PEM)",
                key=key,
            )
    if config.ssl_client_auth not in CLIENT_AUTH_VALUES:
        raise ConfigError(
            f"ssl.client.auth: {config.ssl_client_auth!r} is not allowed; allowed: "
            f"{', '.join(map(repr, CLIENT_AUTH_VALUES))}",
            key="ssl.client.auth",
        )
    inline = (config.ssl_keystore_key, config.ssl_keystore_certificate_chain)
    if config.ssl_keystore_location is not None and any(v is not None for v in inline):
        raise ConfigError(
            "give either ssl.keystore.location or ssl.keystore.key with "
            "ssl.keystore.certificate.chain, not both",
            key="ssl.keystore.location",
        )
    if (inline[0] is None) != (inline[1] is None):
        raise ConfigError(
            "ssl.keystore.key and ssl.keystore.certificate.chain go together: give both, or "
            "ssl.keystore.location",
            key="ssl.keystore.key",
        )
    if not config.ssl_principal_mapping_rules:
        raise ConfigError(
            "ssl.principal.mapping.rules is empty; allowed: Kafka's rules, e.g. 'DEFAULT'",
            key="ssl.principal.mapping.rules",
        )


def _validate_side_listeners(config: NodeConfig) -> None:
    """metrics.listener and health.listener: valid ports, distinct from each other and from
    the main listener when on the same host (one of them could not bind)."""
    taken = {("listeners", config.listener.host, config.listener.port)}
    side = (
        ("metrics.listener", config.metrics_listener),
        ("health.listener", config.health_listener),
    )
    for key, address in side:
        if address is None:
            continue
        check_port(key, address.port, minimum=0)
        for other, host, port in taken:
            same_host = host == address.host or "0.0.0.0" in (host, address.host)
            if port != 0 and port == address.port and same_host:
                raise ConfigError(
                    f"{key}: port {address.port} is already {other}'s on {host}; give it a "
                    "port of its own",
                    key=key,
                )
        taken.add((key, address.host, address.port))


def _format_voters(voters: Mapping[int, HostPort]) -> str:
    return ", ".join(f"{voter_id}@{address}" for voter_id, address in sorted(voters.items()))


# ----- what several keys decide together ---------------------------------------------------------


def served_listener(config: NodeConfig) -> Listener:
    """The gRPC listener: the first of controller.listener.names on a controller, else
    inter.broker.listener.name on a broker-only node, else the first entry (checked by
    ``_validate_listeners``: a name given is among the listeners)."""
    listeners = config.listeners
    by_name = {listener.name: listener for listener in listeners}
    if config.is_controller:
        for name in config.controller_listener_names:
            if name in by_name:
                return by_name[name]
    elif config.inter_broker_listener_name in by_name:
        return by_name[config.inter_broker_listener_name]
    return listeners[0]


def advertised_listener(config: NodeConfig) -> Listener:
    """The address a broker registers: its advertised.listeners entry named like the served
    listener; else, for a listener on every interface of a node that is also a voter, its
    address in controller.quorum.voters; else the served listener."""
    served = config.listener
    for advertised in config.advertised_listeners:
        if advertised.name == served.name:
            return advertised
    voter = config.controller_quorum_voters.get(config.node_id)
    if is_wildcard(served.host) and config.is_controller and voter is not None:
        return Listener(served.name, voter.host, voter.port)
    return named_host(served)


def named_host(listener: Listener) -> Listener:
    """A listener with an empty host (``NAME://:port``: every interface) is advertised under
    this machine's host name, as Kafka does; ``0.0.0.0`` and ``::`` are not addresses others
    can use and need ``advertised.listeners``."""
    if not listener.host_omitted:
        return listener
    return Listener(listener.name, socket.getfqdn(), listener.port)
