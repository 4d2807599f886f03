"""Hands tinygrad the r570.144 firmware from nvbare's verified cache, without network.

tinygrad 0.14 fetches GSP firmware from linux-firmware at a pinned commit
(`fetch_fw` in tinygrad/helpers.py) and checks each file against its own sha256 pin; a file
already in its download cache (XDG_CACHE_HOME/tinygrad/downloads/fw/<md5 of the URL>) is used
if its hash matches. This puts nvbare's copies there. Usage: tinygrad_firmware.py NVBARE_FW_DIR
XDG_CACHE_HOME.
"""
import hashlib, pathlib, sys

BASE = "https://gitlab.com/kernel-firmware/linux-firmware/-/raw/0a6871b19abf5d6e024b5d208b101ae53e7fa0de"
FILES = [
    "nvidia/ga102/gsp/gsp-570.144.bin",
    "nvidia/ad102/gsp/booter_load-570.144.bin",
    "nvidia/ad102/gsp/bootloader-570.144.bin",
    "nvidia/gb202/gsp/bootloader-570.144.bin",
    "nvidia/gb202/gsp/fmc-570.144.bin",
]


def main():
    src, cache = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out = cache / "tinygrad" / "downloads" / "fw"
    out.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        data = (src / f).read_bytes()
        (out / hashlib.md5(f"{BASE}/{f}".encode()).hexdigest()).write_bytes(data)
        print(f"witness: {f} (sha256 {hashlib.sha256(data).hexdigest()[:16]}...) -> tinygrad's cache")


if __name__ == "__main__":
    main()
