# A device's Prio3 report for two aggregators: the measurement sharded and
# proved, the leader's input share in the clear and the helper's sealed with
# HPKE to the helper's public key, so that whoever carries the report (the
# broker, the leader) never holds both shares. MicroPython-compatible.

from rase_device import hpke
from rase_device.entropy import system_read
from rase_device.prio3 import NONCE_SIZE

INFO_LABEL = b"rase prio3 helper input share v1"


def helper_share_info(ctx, nonce, public_share):
    """HPKE info binding a sealed helper share to its report: a share moved to
    another report, context or public share does not open."""
    return INFO_LABEL + len(ctx).to_bytes(2, "big") + ctx + nonce + public_share


def make_report(vdaf, ctx, measurement, helper_public_key, read=None):
    """(nonce, public_share, leader_input_share, sealed_helper_input_share), bytes each.

    read(n): CSPRNG bytes (default os.urandom); the nonce, the sharding
    randomness and HPKE's ephemeral key all come from it."""
    if vdaf.SHARES != 2:
        raise ValueError("a report has one leader and one helper share; this Prio3 has %d shares" % vdaf.SHARES)
    if read is None:
        read = system_read()
    nonce = bytes(read(NONCE_SIZE))
    rand = bytes(read(vdaf.RAND_SIZE))
    public_share, input_shares = vdaf.shard(ctx, measurement, nonce, rand)
    sealed = hpke.seal(helper_public_key, helper_share_info(ctx, nonce, public_share), b"", input_shares[1], read)
    return nonce, public_share, input_shares[0], sealed
