//! One thread's Lua VMs, each lent to one script run at a time. A run may wait for other
//! shards in the middle (its thread keeps serving other work meanwhile), and Redis's
//! environment has per-run globals (KEYS, ARGV, the script protocol), so runs never share a
//! VM: a run that finds every VM lent gets a new one, up to [`VMS_PER_THREAD`], and waits
//! beyond that. Most threads only ever build one: a run on one shard executes in one go.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};

use futures_channel::oneshot;

use crate::vm::ScriptVm;

/// Runs one thread may have under way at once (each waiting for other shards, or running):
/// runs over several shards hold their VM across round trips, and with one VM per thread
/// they queued behind each other's waits.
pub const VMS_PER_THREAD: usize = 4;

#[derive(Default)]
pub struct VmSlot {
    /// VMs no run holds, most recently returned last. Boxed: a VM is a few hundred bytes
    /// that would otherwise be copied several times per run on its way in and out.
    #[allow(
        clippy::vec_box,
        reason = "VMs move out of the Vec and back on every run"
    )]
    idle: RefCell<Vec<Box<ScriptVm>>>,
    lent: Cell<usize>,
    waiting: RefCell<VecDeque<oneshot::Sender<()>>>,
}

impl VmSlot {
    /// Borrows an idle VM, or a new one while fewer than [`VMS_PER_THREAD`] exist, else waits
    /// for one; VMs built for an older script cache generation (before SCRIPT FLUSH) are
    /// dropped on the way.
    pub async fn lend(&self, generation: u64) -> Result<VmLease<'_>, String> {
        loop {
            match self.try_take(generation) {
                Some(Ok(vm)) => return Ok(self.lease(vm)),
                Some(Err(e)) => return Err(crate::vm::lua_text(e)),
                None => {
                    let (tx, rx) = oneshot::channel();
                    self.waiting.borrow_mut().push_back(tx);
                    let _ = rx.await;
                }
            }
        }
    }

    /// A VM now if one is idle or may be built (a run executed in one go on its shard's
    /// thread); None while all are lent or when one cannot be built.
    pub fn try_lend(&self, generation: u64) -> Option<VmLease<'_>> {
        let vm = self.try_take(generation)?.ok()?;
        Some(self.lease(vm))
    }

    /// A VM now, built beyond [`VMS_PER_THREAD`] when every VM is lent: for a run that
    /// finishes in one go and may not be turned away (a batched run that never leaves its
    /// shard). The extra VM is dropped when it comes back.
    pub fn lend_now(&self, generation: u64) -> Result<VmLease<'_>, String> {
        let vm = match self.try_take(generation) {
            Some(Ok(vm)) => vm,
            None => Box::new(ScriptVm::new(generation).map_err(crate::vm::lua_text)?),
            Some(Err(e)) => return Err(crate::vm::lua_text(e)),
        };
        Ok(self.lease(vm))
    }

    /// Bytes the idle VMs' Lua states use (a lent one is counted once it is back).
    pub fn used_memory(&self) -> usize {
        self.idle.borrow().iter().map(|vm| vm.used_memory()).sum()
    }

    /// An idle VM of `generation`, or a new one; None when every VM is lent.
    fn try_take(&self, generation: u64) -> Option<mlua::Result<Box<ScriptVm>>> {
        let mut idle = self.idle.borrow_mut();
        while let Some(vm) = idle.pop() {
            if vm.generation == generation {
                return Some(Ok(vm));
            }
        }
        if self.lent.get() >= VMS_PER_THREAD {
            return None;
        }
        Some(ScriptVm::new(generation).map(Box::new))
    }

    fn lease(&self, vm: Box<ScriptVm>) -> VmLease<'_> {
        self.lent.set(self.lent.get() + 1);
        VmLease {
            slot: self,
            vm: Some(vm),
        }
    }

    fn give_back(&self, vm: Option<Box<ScriptVm>>) {
        self.lent.set(self.lent.get() - 1);
        let mut idle = self.idle.borrow_mut();
        if let Some(vm) = vm.filter(|_| idle.len() + self.lent.get() < VMS_PER_THREAD) {
            idle.push(vm);
        }
        // Only a VM a waiter can take wakes it (not an extra one dropped while every VM is
        // still lent): woken for nothing, it would queue again behind the others.
        let free = !idle.is_empty() || self.lent.get() < VMS_PER_THREAD;
        drop(idle);
        if !free {
            return;
        }
        while let Some(next) = self.waiting.borrow_mut().pop_front() {
            if next.send(()).is_ok() {
                break;
            }
        }
    }
}

/// The borrowed VM; returned to its slot when dropped, also when the run is abandoned
/// half-way (its client went away).
pub struct VmLease<'a> {
    slot: &'a VmSlot,
    vm: Option<Box<ScriptVm>>,
}

impl Deref for VmLease<'_> {
    type Target = ScriptVm;
    fn deref(&self) -> &ScriptVm {
        self.vm
            .as_ref()
            .expect("a lease holds its VM until dropped")
    }
}

impl DerefMut for VmLease<'_> {
    fn deref_mut(&mut self) -> &mut ScriptVm {
        self.vm
            .as_mut()
            .expect("a lease holds its VM until dropped")
    }
}

impl Drop for VmLease<'_> {
    fn drop(&mut self) {
        self.slot.give_back(self.vm.take());
    }
}

#[cfg(test)]
mod tests {
    use futures_lite::future::{block_on, poll_once};

    use super::*;

    #[test]
    fn each_run_gets_a_vm_of_its_own_up_to_the_limit() {
        let slot = VmSlot::default();
        let mut leases: Vec<VmLease<'_>> = (0..VMS_PER_THREAD)
            .map(|_| slot.try_lend(1).expect("a VM"))
            .collect();
        assert!(slot.try_lend(1).is_none(), "every VM is lent");
        let mut waiting = Box::pin(slot.lend(1));
        assert!(block_on(poll_once(&mut waiting)).is_none(), "waits");
        assert_eq!(slot.used_memory(), 0, "lent VMs are not counted");
        leases.pop();
        let lease = block_on(poll_once(&mut waiting))
            .expect("lent once one came back")
            .expect("a VM");
        assert_eq!(lease.generation, 1);
        drop(lease);
        drop(leases);
        assert!(slot.used_memory() > 0, "idle VMs are counted");
        // SCRIPT FLUSH: the next run gets a VM of the new generation, the old ones go.
        let fresh = slot.try_lend(2).expect("a VM");
        assert_eq!(fresh.generation, 2);
        drop(fresh);
        assert_eq!(slot.idle.borrow().len(), 1);
    }

    #[test]
    fn a_run_that_may_not_wait_gets_a_vm_beyond_the_limit() {
        let slot = VmSlot::default();
        let leases: Vec<VmLease<'_>> = (0..VMS_PER_THREAD)
            .map(|_| slot.try_lend(1).expect("a VM"))
            .collect();
        assert!(slot.try_lend(1).is_none(), "every VM is lent");
        let extra = slot.lend_now(1).expect("one more VM");
        let mut first = Box::pin(slot.lend(1));
        let mut second = Box::pin(slot.lend(1));
        assert!(block_on(poll_once(&mut first)).is_none(), "waits");
        assert!(block_on(poll_once(&mut second)).is_none(), "waits");
        drop(extra);
        assert_eq!(slot.idle.borrow().len(), 0, "the extra VM is not kept");
        assert!(
            block_on(poll_once(&mut first)).is_none(),
            "still every VM lent"
        );
        assert!(
            block_on(poll_once(&mut second)).is_none(),
            "still every VM lent"
        );
        let mut leases = leases;
        leases.pop();
        // The first waiter keeps its place: the extra VM going did not wake it for nothing.
        assert!(
            block_on(poll_once(&mut second)).is_none(),
            "the first waiter goes first"
        );
        let lease = block_on(poll_once(&mut first))
            .expect("the first waiter gets the VM")
            .expect("a VM");
        drop(lease);
        assert!(
            block_on(poll_once(&mut second)).is_some(),
            "then the second"
        );
        drop(leases);
        assert_eq!(slot.idle.borrow().len(), VMS_PER_THREAD);
        let again = slot.lend_now(1).expect("an idle VM");
        assert_eq!(
            slot.idle.borrow().len(),
            VMS_PER_THREAD - 1,
            "taken from the idle ones"
        );
        drop(again);
    }
}
