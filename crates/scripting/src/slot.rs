//! One thread's Lua VM, lent to one script run at a time. A run may wait for another shard
//! in the middle (its thread keeps serving other work meanwhile), and Redis's environment
//! has per-run globals (KEYS, ARGV, the script protocol), so a second run on the same
//! thread waits for the VM instead of interleaving with the first.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};

use futures_channel::oneshot;

use crate::vm::ScriptVm;

#[derive(Default)]
pub struct VmSlot {
    vm: RefCell<Option<ScriptVm>>,
    lent: Cell<bool>,
    waiting: RefCell<VecDeque<oneshot::Sender<()>>>,
}

impl VmSlot {
    /// Waits until the VM is free and borrows it; a VM built for an older script cache
    /// generation (before SCRIPT FLUSH) is replaced by a fresh one.
    pub async fn lend(&self, generation: u64) -> Result<VmLease<'_>, String> {
        while self.lent.get() {
            let (tx, rx) = oneshot::channel();
            self.waiting.borrow_mut().push_back(tx);
            let _ = rx.await;
        }
        self.lent.set(true);
        let vm = match self.current_vm(generation) {
            Ok(vm) => vm,
            Err(e) => {
                self.give_back(None);
                return Err(crate::vm::lua_text(e));
            }
        };
        Ok(VmLease {
            slot: self,
            vm: Some(vm),
        })
    }

    /// The VM now if no run holds it (a run executed in one go on its shard's thread), built
    /// fresh when the script cache generation changed; None while lent or when it cannot be
    /// built.
    pub fn try_lend(&self, generation: u64) -> Option<VmLease<'_>> {
        if self.lent.get() {
            return None;
        }
        let vm = self.current_vm(generation).ok()?;
        self.lent.set(true);
        Some(VmLease {
            slot: self,
            vm: Some(vm),
        })
    }

    /// Bytes the idle VM's Lua state uses (0 while lent or not yet built).
    pub fn used_memory(&self) -> usize {
        self.vm.borrow().as_ref().map_or(0, ScriptVm::used_memory)
    }

    /// The kept VM if it belongs to script cache generation `generation`, else a new one.
    fn current_vm(&self, generation: u64) -> mlua::Result<ScriptVm> {
        let kept = self
            .vm
            .borrow_mut()
            .take()
            .filter(|v| v.generation == generation);
        match kept {
            Some(vm) => Ok(vm),
            None => ScriptVm::new(generation),
        }
    }

    fn give_back(&self, vm: Option<ScriptVm>) {
        if vm.is_some() {
            *self.vm.borrow_mut() = vm;
        }
        self.lent.set(false);
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
    vm: Option<ScriptVm>,
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
