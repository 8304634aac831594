"""The scripted server keeps answering in a process with more than 1,024 open files (a long test session):
select() refuses such descriptors, and the server took that for a client that had hung up (CI failure)."""

import os
import resource

import openai
import pytest

from tests.helpers.fakellm import FakeLLMServer


def test_the_scripted_server_answers_when_descriptors_pass_1024():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the open-file limit ({hard}) is below what the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200) if hard == resource.RLIM_INFINITY
                                                else min(max(soft, 1200), hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with FakeLLMServer("The answer is 3", latency=0.05) as srv:
            client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            client.close()
        assert reply.choices[0].message.content == "The answer is 3"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
