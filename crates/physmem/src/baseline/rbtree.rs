//! `rbtree`: NetBSD's `UVM_HOTPLUG` design. Segments are nodes of a
//! red-black tree keyed by start; a handle is the node's address, which does
//! not move while the node lives (and dangles once it is freed).

use alloc::boxed::Box;
use alloc::collections::BTreeSet;
use core::cell::Cell;

use intrusive_collections::{intrusive_adapter, Bound, KeyAdapter, RBTree, RBTreeLink};

use super::{checked_range, descriptors, Descriptors};
use crate::error::PhysmemError;
use crate::page::Page;
use crate::range::Lookup;
use crate::segments::PhysSegments;
use crate::types::{PageCount, Pfn};

struct Node<P> {
    link: RBTreeLink,
    // Cells: the tree hands out shared references; front unplug moves
    // `start` without changing the segments' order.
    start: Cell<u64>,
    end: Cell<u64>,
    pages: Descriptors<P>,
    first: Cell<usize>,
}

intrusive_adapter!(NodeAdapter<P> = Box<Node<P>>: Node<P> { link: RBTreeLink });

impl<'a, P> KeyAdapter<'a> for NodeAdapter<P> {
    type Key = u64;
    fn get_key(&self, node: &'a Node<P>) -> u64 {
        node.start.get()
    }
}

/// A segment's node address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RbTreeHandle(*const ());

/// Segments in an intrusive red-black tree.
pub struct RbTreeSegments<P> {
    tree: RBTree<NodeAdapter<P>>,
    /// Live node addresses, only so that `bounds` never reads freed memory;
    /// lookups do not use it. A freed address may be reused by a new node,
    /// which is exactly how a NetBSD handle goes silently wrong.
    live: BTreeSet<usize>,
}

impl<P: Page> RbTreeSegments<P> {
    /// An empty tree.
    pub fn new() -> Self {
        RbTreeSegments {
            tree: RBTree::new(NodeAdapter::new()),
            live: BTreeSet::new(),
        }
    }

    /// The descriptor of `pfn`.
    pub fn page(&self, pfn: Pfn) -> Option<&P> {
        let node = self.search(pfn.0)?;
        node.pages
            .get(node.first.get() + (pfn.0 - node.start.get()) as usize)
    }

    #[inline]
    fn search(&self, pfn: u64) -> Option<&Node<P>> {
        let node = self.tree.upper_bound(Bound::Included(&pfn)).get()?;
        (pfn < node.end.get()).then_some(node)
    }

    fn node(&self, handle: RbTreeHandle) -> Option<&Node<P>> {
        if !self.live.contains(&(handle.0 as usize)) {
            return None;
        }
        // SAFETY: the address is a live node of this tree.
        Some(unsafe { &*(handle.0 as *const Node<P>) })
    }

    fn handle(node: &Node<P>) -> RbTreeHandle {
        RbTreeHandle(node as *const Node<P> as *const ())
    }
}

impl<P: Page> Default for RbTreeSegments<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Page> PhysSegments for RbTreeSegments<P> {
    type Handle = RbTreeHandle;

    fn name(&self) -> &'static str {
        "rbtree"
    }

    fn plug(&mut self, pfn: Pfn, npages: PageCount) -> Result<RbTreeHandle, PhysmemError> {
        let end = checked_range(pfn, npages)?;
        if let Some(s) = self.tree.upper_bound(Bound::Excluded(&end)).get() {
            if s.end.get() > pfn.0 {
                return Err(PhysmemError::Overlap {
                    existing_start: Pfn(s.start.get()),
                    existing_end: Pfn(s.end.get()),
                });
            }
        }
        let node = Box::new(Node {
            link: RBTreeLink::new(),
            start: Cell::new(pfn.0),
            end: Cell::new(end),
            pages: descriptors(pfn, npages.0),
            first: Cell::new(0),
        });
        let handle = Self::handle(&node);
        self.tree.insert(node);
        self.live.insert(handle.0 as usize);
        Ok(handle)
    }

    fn unplug(&mut self, pfn: Pfn, npages: PageCount) -> Result<(), PhysmemError> {
        let end = checked_range(pfn, npages)?;
        let outside = PhysmemError::NotInOneSegment { pfn, npages };
        let node = self.search(pfn.0).ok_or(outside)?;
        if end > node.end.get() {
            return Err(outside);
        }
        let (start, stop) = (node.start.get(), node.end.get());
        match (pfn.0 == start, end == stop) {
            (true, true) => {
                if self.live.len() == 1 {
                    return Err(PhysmemError::LastSegment);
                }
                let handle = Self::handle(node);
                // SAFETY: the node is in this tree.
                let mut cursor = unsafe { self.tree.cursor_mut_from_ptr(node) };
                drop(cursor.remove());
                self.live.remove(&(handle.0 as usize));
            }
            (true, false) => {
                node.first.set(node.first.get() + (end - start) as usize);
                node.start.set(end);
            }
            (false, true) => node.end.set(pfn.0),
            (false, false) => {
                let upper = Box::new(Node {
                    link: RBTreeLink::new(),
                    start: Cell::new(end),
                    end: Cell::new(stop),
                    pages: node.pages.clone(),
                    first: Cell::new(node.first.get() + (end - start) as usize),
                });
                node.end.set(pfn.0);
                let handle = Self::handle(&upper);
                self.tree.insert(upper);
                self.live.insert(handle.0 as usize);
            }
        }
        Ok(())
    }

    #[inline]
    fn find(&self, pfn: Pfn) -> Option<Lookup<RbTreeHandle>> {
        let node = self.search(pfn.0)?;
        Some(Lookup {
            segment: Self::handle(node),
            offset: PageCount(pfn.0 - node.start.get()),
        })
    }

    fn bounds(&self, handle: RbTreeHandle) -> Option<(Pfn, Pfn)> {
        self.node(handle)
            .map(|n| (Pfn(n.start.get()), Pfn(n.end.get())))
    }

    fn first(&self) -> Option<RbTreeHandle> {
        self.tree.front().get().map(Self::handle)
    }

    fn last(&self) -> Option<RbTreeHandle> {
        self.tree.back().get().map(Self::handle)
    }

    fn next(&self, handle: RbTreeHandle) -> Option<RbTreeHandle> {
        let node = self.node(handle)?;
        // SAFETY: live node of this tree.
        let mut cursor = unsafe { self.tree.cursor_from_ptr(node) };
        cursor.move_next();
        cursor.get().map(Self::handle)
    }

    fn prev(&self, handle: RbTreeHandle) -> Option<RbTreeHandle> {
        let node = self.node(handle)?;
        // SAFETY: live node of this tree.
        let mut cursor = unsafe { self.tree.cursor_from_ptr(node) };
        cursor.move_prev();
        cursor.get().map(Self::handle)
    }

    fn count(&self) -> usize {
        self.live.len()
    }

    fn highest_frame(&self) -> Option<Pfn> {
        self.tree.back().get().map(|n| Pfn(n.end.get() - 1))
    }
}
