//! The sequencer's NIC side: a packet arriving at a NIC (receive port
//! occupancy, delivery into the engine), a NIC putting a packet on its
//! link (serialisation, the switch or the peer's port), and a NIC engine's
//! poll (its effects become actions: transmissions, memory writes that
//! may end ranks' waits, its next timer).

use super::*;

impl Kernel {
    /// Packet `packet` has arrived at NIC `nic` (now).
    pub(super) fn arrive(&self, w: &mut World, nic: usize, packet: WirePacket) {
        let t = w.now;
        let e = self.entity_nic(nic);
        let h = hash_of(packet.header.as_bytes());
        Self::note(
            w,
            t,
            e,
            3,
            h,
            u64::from(packet.payload.map_or(0, |p| p.len)),
        );
        if let Some(tunnel) = packet.tunnel
            && nic % self.rails != usize::from(tunnel.nic_rail)
        {
            // Received on the sibling's port: handed over to the NIC it is
            // for (one PCIe hop; the sibling's processor is not involved).
            let target = nic - nic % self.rails + usize::from(tunnel.nic_rail);
            if target < self.nodes * self.rails {
                let e = self.entity_nic(target);
                self.push(
                    w,
                    t + self.costs.pci_latency,
                    e,
                    Action::Arrive {
                        nic: target,
                        packet,
                    },
                );
            }
            return;
        }
        if let Some(slot) = w.nics.get_mut(nic) {
            slot.engine.hardware_mut().inbox.push_back(packet);
            self.schedule_poll(w, nic, t);
        }
    }

    /// If NIC `nic` is stalled by an injected fault at `now`, when it
    /// resumes.
    fn stalled_until(&self, w: &World, nic: usize, now: Ps) -> Option<Ps> {
        let spec = w.faults.first()?.spec();
        if spec.stalls.is_empty() {
            return None;
        }
        let slot = w.nics.get(nic)?;
        spec.stalled_until(slot.node as u16, slot.rail as u8, now / 1000)
            .map(|ns| ns.saturating_mul(1000))
    }

    /// A sibling's `PEER_SET` word reaches NIC `nic` (now): into its FIFO,
    /// and the NIC is polled.
    pub(super) fn peer_set_arrives(&self, w: &mut World, nic: usize, word: u64) {
        let t = w.now;
        Self::note(w, t, self.entity_nic(nic), 5, word, 0);
        if let Some(slot) = w.nics.get(nic) {
            slot.regs.peer_push(word);
            self.schedule_poll(w, nic, t);
        }
    }

    /// A packet whose first bit reaches NIC `nic`'s port at `first_bit`.
    /// Data waits for the receiving port, which takes packets in the order
    /// their first bits arrive; acknowledgements travel on the link level
    /// beside it.
    pub(super) fn transmit(
        &self,
        w: &mut World,
        nic: usize,
        first_bit: Ps,
        ser: Ps,
        packet: WirePacket,
    ) {
        if nic >= self.nodes * self.rails {
            return; // no such node: the packet is lost, the sender retries
        }
        let entity = self.entity_nic(nic);
        if is_control(&packet) {
            self.push(w, first_bit + ser, entity, Action::Arrive { nic, packet });
            return;
        }
        if let Some((at, token)) = w.ports.offer(nic, first_bit, ser, packet) {
            self.push(w, at, entity, Action::PortServe { nic, token });
        }
    }

    pub(super) fn poll(&self, w: &mut World, nic: usize) {
        let now = w.now;
        let entity = self.entity_nic(nic);
        if let Some(until) = self.stalled_until(w, nic, now) {
            // A stalled processor: whatever arrives waits for it.
            Self::note(w, now, entity, 7, until, 0);
            if let Some(slot) = w.nics.get_mut(nic) {
                slot.next_poll = None;
            }
            self.schedule_poll(w, nic, until);
            return;
        }
        let (node, rail, outcome, effects, ready_at) = {
            let slot = &mut w.nics[nic];
            slot.next_poll = None;
            slot.engine.hardware_mut().begin(now);
            let outcome = slot.engine.poll();
            let board = slot.engine.hardware_mut();
            let effects = std::mem::take(&mut board.effects);
            if let (Some(tl), Some(spans)) = (w.timeline.as_ref(), board.spans.as_mut()) {
                trace_nic(tl, slot.node, slot.rail, spans.drain(..));
            }
            (slot.node, slot.rail, outcome, effects, board.ready_at())
        };
        if outcome.progressed {
            w.watchdog.progress(now);
        }
        Self::note(
            w,
            now,
            entity,
            2,
            effects.len() as u64,
            u64::from(outcome.progressed) | (u64::from(outcome.pending) << 1),
        );
        let mut touched: Option<Ps> = None;
        // What the NIC wrote, so that only the ranks watching a word in it
        // test their words again (each test is a load from another rank's
        // memory; a 1024-rank run makes hundreds of millions of them).
        // (The list is the world's, kept between polls: no allocation per
        // poll.)
        let mut written = std::mem::take(&mut w.written);
        written.clear();
        for effect in &effects {
            match *effect {
                Effect::Send {
                    mut packet,
                    depart,
                    ser,
                } => {
                    w.stats.packets += 1;
                    let h = hash_of(packet.header.as_bytes());
                    w.trace.mix(&[h, depart]);
                    if let Some(tl) = w.timeline.as_ref() {
                        trace_packet(tl, node, rail, &packet, depart, ser);
                    }
                    // A tunnelled packet crosses to the sibling first (one
                    // PCIe hop), then takes the sibling's transmit port
                    // (data; acknowledgements travel on the link level)
                    // and rail.
                    let wire = packet.wire_rail(rail);
                    let depart = match packet.tunnel {
                        Some(_) => {
                            let at = depart + self.costs.pci_latency;
                            let sibling = node * self.rails + wire;
                            match w.nics.get_mut(sibling) {
                                Some(s) if !is_control(&packet) => s
                                    .engine
                                    .hardware_mut()
                                    .carry_for_sibling(at, ser, packet.header.dst_node.get()),
                                _ => at,
                            }
                        }
                        None => depart,
                    };
                    let fate = self.judge(w, wire, &mut packet, depart);
                    for first_bit in fate.arrivals(depart + self.costs.link_latency) {
                        if is_collective(&packet) {
                            let at = first_bit + ser;
                            let e = self.entity_switch(wire);
                            self.push(w, at, e, Action::SwitchIn { rail: wire, packet });
                        } else {
                            let dst = packet.header.dst_node.get() as usize;
                            if dst < self.nodes {
                                self.transmit(w, dst * self.rails + wire, first_bit, ser, packet);
                            }
                        }
                    }
                }
                Effect::Touched { at, addr, len } => {
                    touched = Some(touched.map_or(at, |t: Ps| t.max(at)));
                    match written.last_mut() {
                        Some((a, l)) if *a + *l == addr => *l += len,
                        _ => written.push((addr, len)),
                    }
                }
                Effect::RegChanged { at, offset, value } => {
                    touched = Some(touched.map_or(at, |t: Ps| t.max(at)));
                    // An attach restarts the context's command ring at the
                    // tail it stores: the host's next post counts its
                    // commands from there, not from the last owner's tail.
                    if let Some(ctx) = railcoll_fw::abi::regs::CQ_TAIL.context_of(offset)
                        && let Some(tail) = w.nics[nic].tails.get_mut(ctx as usize)
                    {
                        *tail = value;
                    }
                }
                Effect::PeerSet { rail, word, at } => {
                    let target = node * self.rails + usize::from(rail);
                    let e = self.entity_nic(target);
                    self.push(w, at, e, Action::PeerSet { nic: target, word });
                }
                Effect::Wake { ctx, at } => {
                    let target = w.ranks.local(node, ctx as usize);
                    if let Some(r) = target {
                        self.node_changed(w, node, at + self.costs.host_poll, Some(r), None);
                    }
                }
            }
        }
        if let Some(at) = touched {
            self.node_changed(w, node, at + self.costs.host_poll, None, Some(&written));
        }
        w.written = written;
        if outcome.pending && outcome.progressed {
            self.schedule_poll(w, nic, ready_at.max(now));
        }
        if let Some(t) = outcome.timer_ns {
            self.schedule_poll(w, nic, t.saturating_mul(1000));
        }
    }
}
