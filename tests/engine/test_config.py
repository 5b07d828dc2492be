"""Config: every problem reported at once with key and fix; secrets never in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import load_config, render_config
from engine.errors import ConfigError


def test_rendered_config_round_trips(tmp_path: Path) -> None:
    text = render_config(bootstrap_servers="127.0.0.1:9092", topics=r"^db\.", target="lake")
    path = tmp_path / "c.toml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.source.topics == r"^db\."
    assert cfg.target_path() == (tmp_path / "lake").resolve()
    assert cfg.work_path() == (tmp_path / ".cdcctl").resolve()


def test_all_problems_reported_together(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[source]\nbootstrap_servers = "nohost"\ntopics = "(("\nformat = "protobuf"\n'
        "typo = 1\n[hudi]\nnum_buckets = 0\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    keys = {key for key, _, _ in info.value.problems}
    assert keys == {
        "source.bootstrap_servers",
        "source.topics",
        "source.format",
        "source.typo",
        "target",
        "hudi.num_buckets",
    }


def test_secrets_are_refused_in_file_and_read_from_env(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\n'
        '[source.kafka_options]\n"sasl.password" = "hunter2"\n[target]\npath = "l"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "secret" in str(info.value)
    path.write_text(
        '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\nsasl_password_env = "MY_PW"\n'
        '[target]\npath = "l"\n'
    )
    cfg = load_config(path)
    with pytest.raises(ConfigError, match="MY_PW"):
        cfg.source.sasl_password()
    monkeypatch.setenv("MY_PW", "hunter2")
    secret = load_config(path).source.sasl_password()
    assert secret is not None and secret.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(load_config(path)) and "hunter2" not in str(secret)


def test_missing_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[source\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_example_config_is_valid() -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "cdcctl.toml")
    assert cfg.source.exclude_tables == ["inventory_audit_*"]
    assert cfg.source.sasl_password() is None  # only commented out there


def test_errors_tolerance_is_none_by_default_and_checked(tmp_path: Path) -> None:
    base = '[source]\nbootstrap_servers = "h:1"\ntopics = "."\n[target]\npath = "lake"\n'
    path = tmp_path / "c.toml"
    path.write_text(base)
    assert load_config(path).errors.tolerance == "none"
    path.write_text(base + '[errors]\ntolerance = "all"\n')
    assert load_config(path).errors.tolerance == "all"
    path.write_text(base + '[errors]\ntolerance = "some"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [(key, message, _)] = info.value.problems
    assert key == "errors.tolerance" and '"none"' in message and '"all"' in message


def test_max_bad_fraction_is_refused_with_a_pointer_to_errors_tolerance(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[source]\nbootstrap_servers = "h:1"\ntopics = "."\n[target]\npath = "lake"\n'
        "[replicator]\nmax_bad_fraction = 0.05\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [(key, message, fix)] = info.value.problems
    assert key == "replicator.max_bad_fraction"
    assert "errors.tolerance" in message and "tolerance" in fix


def test_retry_max_seconds_defaults_to_600_and_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    base = '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\n[target]\npath = "l"\n'
    path.write_text(base)
    assert load_config(path).replicator.retry_max_seconds == 600
    path.write_text(base + "[replicator]\nretry_max_seconds = 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [key for key, _, _ in info.value.problems] == ["replicator.retry_max_seconds"]


def test_tls_keys_map_to_librdkafka_and_the_key_password_comes_from_env(
    tmp_path: Path, monkeypatch
) -> None:
    from engine.source.kafka import consumer_settings

    path = tmp_path / "c.toml"
    base = '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\n'
    path.write_text(
        base + 'security_protocol = "SSL"\nssl_ca_location = "ca.pem"\n'
        'ssl_certificate_location = "me.pem"\nssl_key_location = "me.key"\n'
        'ssl_key_password_env = "KEY_PW"\n[target]\npath = "l"\n'
    )
    cfg = load_config(path)
    with pytest.raises(ConfigError, match="KEY_PW"):
        consumer_settings(cfg.source, 10)
    monkeypatch.setenv("KEY_PW", "s3cret")
    settings = consumer_settings(cfg.source, 10)
    assert settings["security.protocol"] == "SSL"
    assert settings["ssl.ca.location"] == "ca.pem"
    assert settings["ssl.certificate.location"] == "me.pem"
    assert settings["ssl.key.location"] == "me.key"
    assert settings["ssl.key.password"] == "s3cret"
    assert settings["ssl.endpoint.identification.algorithm"] == "https"  # on by default
    assert "s3cret" not in repr(cfg)

    path.write_text(
        base + 'security_protocol = "SASL_SSL"\nssl_endpoint_identification = false\n'
        '[target]\npath = "l"\n'
    )
    settings = consumer_settings(load_config(path).source, 10)
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert "ssl.ca.location" not in settings  # the system's CA store
    path.write_text(base + '[target]\npath = "l"\n')
    assert not [k for k in consumer_settings(load_config(path).source, 10) if "ssl" in k]
