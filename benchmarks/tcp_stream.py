#!/usr/bin/python3
"""One TCP stream between two Slurm tasks: the ceiling for inter-node allreduce on this network.

    srun --mpi=none -N 2 -n 2 /usr/bin/python3 benchmarks/tcp_stream.py [--bytes 1G] [--seconds 3]

Task 1 listens on its node's first non-loopback IPv4 address (ephemeral port) and publishes
it through a file in --rendezvous (default /tmp, which both nodes of the local cluster see);
task 0 connects and streams for --seconds. Prints GB/s (1e9 bytes/s) as received.
"""
import argparse
import os
import socket
import time


def my_address():
    import fcntl
    import struct
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            return socket.inet_ntoa(packed[20:24])
        except OSError:
            continue
        finally:
            s.close()
    return "127.0.0.1"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rendezvous", default="/tmp")
    a = ap.parse_args()
    rank = int(os.environ["SLURM_PROCID"])
    job = os.environ.get("SLURM_JOB_ID", "0") + "." + os.environ.get("SLURM_STEP_ID", "0")
    path = os.path.join(a.rendezvous, f"tcp-stream-{job}")
    chunk = 4 << 20
    if rank == 1:
        srv = socket.socket()
        srv.bind((my_address(), 0))
        srv.listen(1)
        with open(path + ".tmp", "w") as f:
            f.write("%s %d" % srv.getsockname())
        os.rename(path + ".tmp", path)
        conn, _ = srv.accept()
        buf = bytearray(chunk)
        view = memoryview(buf)
        total, t0 = 0, None
        while True:
            n = conn.recv_into(view)
            if n == 0:
                break
            if t0 is None:
                t0 = time.perf_counter()
            total += n
        dt = time.perf_counter() - t0
        print(f"tcp stream {os.environ.get('SLURMD_NODENAME', '?')} <- peer: {total / 1e9:.2f} GB in {dt:.2f} s "
              f"= {total / dt / 1e9:.3f} GB/s", flush=True)
        os.unlink(path)
    else:
        deadline = time.time() + 30
        while not os.path.exists(path):
            if time.time() > deadline:
                raise SystemExit("tcp_stream: the listener did not publish its address")
            time.sleep(0.05)
        host, port = open(path).read().split()
        s = socket.create_connection((host, int(port)))
        data = memoryview(bytearray(chunk))
        end = time.perf_counter() + a.seconds
        while time.perf_counter() < end:
            s.sendall(data)
        s.close()


if __name__ == "__main__":
    main()
