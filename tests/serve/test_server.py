"""The planner's HTTP endpoints, on a real loopback server: the JSON is exactly the API's (and so
the CLI's) document, bad input is a 400 naming its field, and the server keeps serving."""

import json
import shlex

import pytest
from http_client import request

import trainbudget.api as tb
from clirun import cli, cli_json
from trainbudget.core.errors import SpecError

EIGHT = {"model": "llama-3-8b", "gpus": "8", "tokens": "1T", "price_per_gpu_hour": "$2.5"}
SMALL_CONFIG = {  # a Llama-shaped config.json, as a user would paste it
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}


def post_json(base_url, path, body):
    status, _, raw = request(base_url + path, body)
    return status, json.loads(raw)


@pytest.mark.parametrize(
    "inputs",
    [
        {"model": "gpt2", "seq_len": "1024"},  # one GPU, no layout
        EIGHT,  # the planner's search, with a cost
        {"config": json.dumps(SMALL_CONFIG), "gpus": "4", "tokens": "10B"},
    ],
    ids=["one-gpu", "planned", "pasted-config"],
)
def test_the_endpoint_returns_exactly_the_apis_to_json(base_url, inputs):
    status, document = post_json(base_url, "/api/estimate", inputs)
    assert status == 200
    options = {k: v for k, v in inputs.items() if k not in ("model", "config")}
    model = json.loads(inputs["config"]) if "config" in inputs else inputs["model"]
    assert document == tb.estimate(model, explain=True, **options).to_json()


def test_the_endpoint_equals_the_cli_estimate_json_explain(base_url):
    _, document = post_json(base_url, "/api/estimate", EIGHT)
    argv = ["--model", "llama-3-8b", "--gpus", "8", "--tokens", "1T"]
    assert document == cli_json("estimate", *argv, "--price-per-gpu-hour", "$2.5", "--explain")
    assert document["derivation"] and document["plans"] and document["cost"] > 0


def test_get_with_a_query_is_the_same_answer_as_post(base_url):
    status, _, raw = request(base_url + "/api/estimate?model=llama-3-8b&gpus=8&tokens=1T"
                             "&price_per_gpu_hour=%242.5")  # fmt: skip
    assert status == 200
    assert json.loads(raw) == post_json(base_url, "/api/estimate", EIGHT)[1]


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ({"gpus": "0"}, "gpus"),
        ({"model": "llama-9"}, "model"),
        ({"tokens": "lots"}, "tokens"),
        ({"gpu": "h101"}, "gpu"),
        ({"config": "{oops"}, "config"),
    ],
)
def test_bad_input_is_one_line_naming_its_field_and_the_server_keeps_serving(
    base_url, inputs, field
):
    status, body = post_json(base_url, "/api/estimate", inputs)
    assert status == 400
    assert body["field"] == field
    assert "\n" not in body["error"] and body["error"].startswith(field)
    if "config" not in inputs:  # the API's own line, word for word
        with pytest.raises(SpecError) as err:
            tb.estimate(inputs.pop("model", "llama-3-8b"), **inputs)
        assert body["error"] == str(err.value)
    assert post_json(base_url, "/api/estimate", {"model": "gpt2"})[0] == 200


@pytest.mark.parametrize(
    ("raw", "status"), [(b"{not json", 400), (b"[1, 2]", 400), (b'{"gpuz": "8"}', 400)]
)
def test_a_malformed_request_is_a_400_not_a_crash(base_url, raw, status):
    code, _, body = request(base_url + "/api/estimate", raw=raw)
    assert code == status and "\n" not in json.loads(body)["error"]


def test_unknown_paths_are_404(base_url):
    assert request(base_url + "/nothing")[0] == 404
    assert request(base_url + "/api/nothing", {})[0] == 404


def test_the_page_and_its_files_are_served_with_no_outside_address(base_url):
    for path, kind in (("/", "text/html"), ("/planner.js", "javascript"), ("/planner.css", "css")):
        status, headers, body = request(base_url + path)
        assert status == 200 and kind in headers["Content-Type"]
        assert b"http://" not in body.replace(b"http://www.w3.org/", b"")  # SVG's namespaces
        assert b"https://" not in body  # no CDN: the page works offline


def test_choices_come_from_the_core_tables_with_the_cli_defaults_among_them(base_url):
    status, _, raw = request(base_url + "/api/choices")
    lists = json.loads(raw)
    assert status == 200
    assert "llama-3-70b" in lists["model"] and "h100-sxm" in lists["gpu"]
    for name, value in lists["defaults"].items():
        assert value in lists[name]
    assert set(lists["engines"]) == {"torchtitan", "megatron", "deepspeed"}


def test_each_plans_command_line_evaluates_that_same_plan(base_url):
    _, document = post_json(base_url, "/api/estimate", EIGHT)
    _, listed = post_json(base_url, "/api/commands", EIGHT)
    assert len(listed["commands"]) == len(document["plans"]) > 1
    for ranked, command in zip(document["plans"], listed["commands"], strict=True):
        argv = shlex.split(command)
        assert argv[:2] == ["trainbudget", "estimate"]
        again = cli_json(*argv[1:])
        assert again["plan"]["description"] == ranked["plan"]["description"]
        assert again["step_seconds"] == pytest.approx(ranked["step_seconds"], rel=1e-12)
        assert again["memory_bytes"]["total"] == ranked["memory_bytes"]["total"]


@pytest.mark.parametrize("engine", ["torchtitan", "megatron", "deepspeed"])
def test_the_best_plans_config_is_what_plan_emit_writes_or_refuses(base_url, engine):
    status, headers, body = request(base_url + "/api/emit", {**EIGHT, "rank": 0, "engine": engine})
    argv = ("--model", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--emit", engine)
    code, out, err = cli("plan", *argv)
    if code == 0:
        assert status == 200 and body.decode() == out
        assert "attachment; filename=" in headers["Content-Disposition"]
    else:  # deepspeed has no context parallelism: the same one-line refusal
        assert status == 400
        assert "trainbudget plan: error: " + json.loads(body)["error"] == err.strip()


@pytest.mark.parametrize(
    ("extra", "field"), [({"rank": 99, "engine": "megatron"}, "rank"), ({"engine": "nemo"}, "emit")]
)
def test_an_emit_that_cannot_be_made_says_why(base_url, extra, field):
    status, body = post_json(base_url, "/api/emit", {**EIGHT, **extra})
    assert status == 400 and body["field"] == field and "\n" not in body["error"]


def test_a_body_too_large_is_refused_unread_and_the_server_keeps_serving(base_url):
    import http.client
    from urllib.parse import urlsplit

    from trainbudget.serve.server import MAX_BODY_BYTES

    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.putrequest("POST", "/api/estimate")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()  # and no body: the server must answer without waiting for it
    response = conn.getresponse()
    assert response.status == 400
    assert json.loads(response.read())["field"] == "Content-Length"
    conn.close()
    assert post_json(base_url, "/api/estimate", {"model": "gpt2"})[0] == 200


def test_a_bug_is_a_500_with_one_line_and_the_server_keeps_serving(base_url, monkeypatch):
    import trainbudget.serve.server as server

    def broken(question):
        raise KeyError("plans")

    monkeypatch.setattr(server, "answer_bytes", broken)
    status, body = post_json(base_url, "/api/estimate", {"model": "gpt2"})
    assert status == 500 and body["error"] == "internal error: KeyError: 'plans'"
    monkeypatch.undo()
    assert post_json(base_url, "/api/estimate", {"model": "gpt2"})[0] == 200


def test_a_plans_command_line_carries_an_accounted_pipeline_split():
    from trainbudget.serve.plan_files import cli_command
    from trainbudget.serve.question import Question

    plan = {"dp": 2, "tp": 8, "pp": 8, "vpp": 8, "cp": 1, "ep": 1, "zero": 1, "zero_shard": 0}
    plan |= {"schedule": "interleaved", "micro_batch": 1, "recompute": "full"}
    plan |= {"recompute_every": 1, "offload_optimizer": "none", "offload_params": "none"}
    plan |= {"global_batch": 32, "pp_layers": [], "sp": True, "flash_attention": True}
    plan |= {"embedding_in_pp_split": True, "loss_in_pp_split": True}
    line = cli_command(Question(model="llama-3-405b"), plan)
    assert "--account-for-embedding" in line and "--account-for-loss" in line
