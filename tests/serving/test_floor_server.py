"""bench/floor_server.py, the floor the batching benchmark weighs the stand-in against: it must
run the real model on each request's image inside merged batches and answer as the stand-in
answers, or its requests/s would mean nothing.

    .venv/bin/python -m pytest tests/serving/test_floor_server.py
"""
import concurrent.futures

import pytest

from bench import bench_serving_floor, raw_clients
from tests.serving.conftest import b64, rest_call

# One batch thread, batches of up to 4 that wait 200 ms for company: 4 concurrent requests share one.
BATCHING = """max_batch_size { value: 4 }
batch_timeout_micros { value: 200000 }
num_batch_threads { value: 1 }
"""


@pytest.fixture(scope="module")
def floor(tiny_export_base, sample_jpegs, tmp_path_factory):
    """The floor server as the benchmark starts it: (port, the JPEG whose answer it sends)."""
    work = tmp_path_factory.mktemp("floor")
    (work / "batching.txt").write_text(BATCHING)
    (work / "answer.jpg").write_bytes(sample_jpegs[0])
    process, port = bench_serving_floor.start_floor_server(
        str(tiny_export_base), str(work / "batching.txt"), str(work / "answer.jpg"))
    yield port, sample_jpegs[0]
    process.terminate()
    process.wait(30)


def predict_on_floor(port, jpeg):
    client = raw_clients.RawRestClient("127.0.0.1", port, "image_classifier", timeout=30)
    try:
        return client.predict([jpeg])
    finally:
        client.close()


@pytest.mark.process
def test_concurrent_requests_get_the_standins_answer_for_the_answer_image(floor, standin):
    port, answer_jpeg = floor
    status, expected = rest_call(standin, "POST", "/v1/models/image_classifier:predict",
                                 {"instances": [b64(answer_jpeg)]})
    assert status == 200
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: predict_on_floor(port, answer_jpeg), range(4)))
    assert answers == [expected["predictions"]] * 4


@pytest.mark.process
def test_a_batch_the_model_fails_on_is_answered_500_not_with_the_ready_made_answer(floor):
    port, _ = floor
    with pytest.raises(RuntimeError, match=r"HTTP 500: .*serving_default failed on this input"):
        predict_on_floor(port, b"not an image")
