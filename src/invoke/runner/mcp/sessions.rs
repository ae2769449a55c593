//! The MCP runner's sessions: one per server (and credential), reused by every call of the
//! invoker that holds it, so a tool call does not pay for starting `npx` and `initialize`.
//!
//! Bounded: at most `max` sessions (the least recently used one goes first), each closed once
//! idle for `idle`; one that died is opened again on its next call. A session is killed when
//! it is dropped, and the cache is dropped with its invoker — in a dispatcher, when a new
//! build replaces the old one and its last request has finished.

use super::client::{Connection, Endpoint};
use crate::invoke::outcome::Failure;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One server's place in the cache: its connection, opened by one caller at a time.
struct Slot {
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    last_used: Mutex<Instant>,
}

impl Slot {
    fn last_used(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Sessions {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    max: usize,
    idle: Duration,
    /// Which addresses a server reached over HTTP may be at.
    egress: crate::invoke::egress::Egress,
}

impl Sessions {
    pub fn new(max: usize, idle: Duration, egress: crate::invoke::egress::Egress) -> Sessions {
        Sessions {
            slots: Mutex::new(HashMap::new()),
            max: max.max(1),
            idle,
            egress,
        }
    }

    /// How many servers have a place (open or being opened).
    pub fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live session for `endpoint`, opened (within `timeout`) when there is none.
    pub async fn get(
        &self,
        endpoint: &Endpoint,
        timeout: Duration,
    ) -> Result<Arc<Connection>, Failure> {
        let key = endpoint.key();
        let slot = self.slot(&key);
        let mut held = slot.connection.lock().await;
        if let Some(c) = held.as_ref().filter(|c| c.is_alive()) {
            return Ok(c.clone());
        }
        // A dead session is dropped (and its process group killed) before a new one starts.
        *held = None;
        let opened = Arc::new(Connection::open(endpoint, timeout, &self.egress).await?);
        *held = Some(opened.clone());
        Ok(opened)
    }

    /// Forget `connection` if it is still the one kept for `endpoint` (it failed under a call).
    pub async fn forget(&self, endpoint: &Endpoint, connection: &Arc<Connection>) {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&endpoint.key())
            .cloned();
        if let Some(slot) = slot {
            let mut held = slot.connection.lock().await;
            if held.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
                *held = None;
            }
        }
    }

    /// The slot for `key`, made when missing; idle slots go first, then the least recently
    /// used ones while there are too many.
    fn slot(&self, key: &str) -> Arc<Slot> {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|k, s| k == key || now.duration_since(s.last_used()) < self.idle);
        if !slots.contains_key(key) {
            while slots.len() >= self.max {
                let Some(oldest) = slots
                    .iter()
                    .min_by_key(|(_, s)| s.last_used())
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                slots.remove(&oldest);
            }
        }
        let slot = slots
            .entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Slot {
                    connection: tokio::sync::Mutex::new(None),
                    last_used: Mutex::new(now),
                })
            })
            .clone();
        *slot.last_used.lock().unwrap_or_else(|p| p.into_inner()) = now;
        slot
    }
}
