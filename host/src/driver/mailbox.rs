//! Register access and the admin mailbox: typed register reads and writes,
//! one mailbox call, and the probe a driver makes before it opens a NIC.

use super::*;

/// Read a register the host may read.
pub fn read_reg<A: HostRead>(io: &dyn RegisterIo, reg: Reg<u64, A>) -> u64 {
    io.read(reg.offset())
}

/// Write a register the host may write. A read-only register does not
/// compile, its access type is not [`HostWrite`]:
///
/// ```
/// use railcoll_host::driver::write_reg;
/// use railcoll_host::fw::abi::regs;
/// fn ring(io: &dyn railcoll_host::regio::RegisterIo) {
///     write_reg(io, regs::MBOX_CMD, 0);
/// }
/// ```
///
/// ```compile_fail,E0277
/// use railcoll_host::driver::write_reg;
/// use railcoll_host::fw::abi::regs;
/// fn ring(io: &dyn railcoll_host::regio::RegisterIo) {
///     write_reg(io, regs::MBOX_STATUS, 0);
/// }
/// ```
pub fn write_reg<A: HostWrite>(io: &dyn RegisterIo, reg: Reg<u64, A>, value: u64) {
    io.write(reg.offset(), value);
}

/// The host's failover policy: the rail whose NIC carries rail `rail`'s
/// flows once their direct path stops answering (`SET_PARAM` 5, docs/abi.md
/// §8.4), among `rails` rails: the next one round, so that the load of
/// one dead rail falls on one survivor and every rail has a sibling. None
/// for a single rail.
pub fn alternate_rail(rail: usize, rails: usize) -> Option<usize> {
    (rails > 1 && rail < rails).then(|| (rail + 1) % rails)
}

/// Run one admin mailbox call. The caller holds the device's admin lock.
pub fn mailbox_call(
    regs: &dyn RegisterIo,
    wait: &dyn WaitHook,
    op: MailboxOp,
    args: [u64; 4],
) -> Result<u64, Error> {
    // The next number after the NIC's last completed call: the caller holds
    // the admin lock, so nobody else is between. (Not a process-global
    // counter: that made two emulated clusters in one process perturb each
    // other's register traffic, which modeled mode's determinism check
    // caught.) Never 0, so a fresh NIC's status cannot match.
    let last = MailboxStatus::from_reg(read_reg(regs, regs::MBOX_STATUS)).seq;
    let seq = last.wrapping_add(1).max(1);
    for (reg, a) in regs::MBOX_ARGS.into_iter().zip(args) {
        write_reg(regs, reg, a);
    }
    write_reg(regs, regs::MBOX_CMD, regs::mailbox_cmd(op, seq));
    let mut status = MailboxStatus::from_reg(0);
    wait.wait_until(&mut || {
        status = MailboxStatus::from_reg(read_reg(regs, regs::MBOX_STATUS));
        status.done && status.seq == seq
    })?;
    match status.result {
        Ok(()) => Ok(read_reg(regs, regs::MBOX_RESULT)),
        Err(code) => Err(Error::Nic {
            rail: usize::MAX,
            code,
        }),
    }
}

/// Check a NIC's identity and ABI version, and read its geometry.
pub fn probe(regs: &dyn RegisterIo) -> Result<(Geometry, Resources), Error> {
    let id = read_reg(regs, regs::ID);
    if id != regs::ID_VALUE {
        return Err(Error::AbiMismatch {
            found: id,
            expected: regs::ID_VALUE,
        });
    }
    let version = read_reg(regs, regs::VERSION);
    if (version >> 16) as u16 != ABI_MAJOR {
        return Err(Error::AbiMismatch {
            found: version,
            expected: railcoll_fw::abi::ABI_VERSION as u64,
        });
    }
    Ok((
        Geometry::from_reg(read_reg(regs, regs::GEOMETRY)),
        Resources::from_reg(read_reg(regs, regs::RESOURCES)),
    ))
}
