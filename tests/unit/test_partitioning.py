import subprocess
import sys

from aiokafka.partitioner import DefaultPartitioner

from pipeline.kafka.admin import partition_for
from pipeline.kinds.hits.files import hit_key


def test_partition_matches_kafka_default_partitioner() -> None:
    parts = list(range(8))
    for page in ("/", "/a", "/ä", "/x" * 50):
        key = hit_key("site", page)
        assert partition_for(key, 8) == DefaultPartitioner()(key, parts, parts)


def test_partition_is_stable_across_processes() -> None:
    code = "from pipeline.kafka.admin import partition_for; print(partition_for(b'site\\x00/page', 12))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
