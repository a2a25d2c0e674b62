//! The generated bindings against the installed header: every size and field offset the
//! transport relies on, as the C compiler computes it in the shim, equals the Rust layout.

use std::mem::{offset_of, size_of};

use zcx_verbs_sys as sys;
use zcx_verbs_sys::zcx_ibv_layout_item as item;

#[test]
fn bound_structs_have_the_c_compilers_layout() {
    if let Some(reason) = sys::VERBS_MISSING {
        println!("skipped: {reason}");
        return;
    }
    let expected: [(item::Type, usize, &str); item::ZCX_IBV_LAYOUT_ITEMS as usize] = [
        (item::ZCX_IBV_SIZEOF_SEND_WR, size_of::<sys::ibv_send_wr>(), "sizeof(ibv_send_wr)"),
        (item::ZCX_IBV_OFFSETOF_SEND_WR_WR_ID, offset_of!(sys::ibv_send_wr, wr_id), "ibv_send_wr.wr_id"),
        (item::ZCX_IBV_OFFSETOF_SEND_WR_NEXT, offset_of!(sys::ibv_send_wr, next), "ibv_send_wr.next"),
        (
            item::ZCX_IBV_OFFSETOF_SEND_WR_SG_LIST,
            offset_of!(sys::ibv_send_wr, sg_list),
            "ibv_send_wr.sg_list",
        ),
        (
            item::ZCX_IBV_OFFSETOF_SEND_WR_NUM_SGE,
            offset_of!(sys::ibv_send_wr, num_sge),
            "ibv_send_wr.num_sge",
        ),
        (item::ZCX_IBV_OFFSETOF_SEND_WR_OPCODE, offset_of!(sys::ibv_send_wr, opcode), "ibv_send_wr.opcode"),
        (
            item::ZCX_IBV_OFFSETOF_SEND_WR_SEND_FLAGS,
            offset_of!(sys::ibv_send_wr, send_flags),
            "ibv_send_wr.send_flags",
        ),
        (
            item::ZCX_IBV_OFFSETOF_SEND_WR_IMM_DATA,
            offset_of!(sys::ibv_send_wr, __bindgen_anon_1),
            "ibv_send_wr.imm_data",
        ),
        (item::ZCX_IBV_OFFSETOF_SEND_WR_WR, offset_of!(sys::ibv_send_wr, wr), "ibv_send_wr.wr"),
        (item::ZCX_IBV_SIZEOF_RECV_WR, size_of::<sys::ibv_recv_wr>(), "sizeof(ibv_recv_wr)"),
        (item::ZCX_IBV_SIZEOF_SGE, size_of::<sys::ibv_sge>(), "sizeof(ibv_sge)"),
        (item::ZCX_IBV_SIZEOF_WC, size_of::<sys::ibv_wc>(), "sizeof(ibv_wc)"),
        (item::ZCX_IBV_OFFSETOF_WC_STATUS, offset_of!(sys::ibv_wc, status), "ibv_wc.status"),
        (item::ZCX_IBV_OFFSETOF_WC_OPCODE, offset_of!(sys::ibv_wc, opcode), "ibv_wc.opcode"),
        (item::ZCX_IBV_OFFSETOF_WC_BYTE_LEN, offset_of!(sys::ibv_wc, byte_len), "ibv_wc.byte_len"),
        (item::ZCX_IBV_OFFSETOF_WC_QP_NUM, offset_of!(sys::ibv_wc, qp_num), "ibv_wc.qp_num"),
        (item::ZCX_IBV_SIZEOF_QP_ATTR, size_of::<sys::ibv_qp_attr>(), "sizeof(ibv_qp_attr)"),
        (
            item::ZCX_IBV_OFFSETOF_QP_ATTR_AH_ATTR,
            offset_of!(sys::ibv_qp_attr, ah_attr),
            "ibv_qp_attr.ah_attr",
        ),
        (
            item::ZCX_IBV_OFFSETOF_QP_ATTR_DEST_QP_NUM,
            offset_of!(sys::ibv_qp_attr, dest_qp_num),
            "ibv_qp_attr.dest_qp_num",
        ),
        (item::ZCX_IBV_SIZEOF_PORT_ATTR, size_of::<sys::ibv_port_attr>(), "sizeof(ibv_port_attr)"),
        (
            item::ZCX_IBV_OFFSETOF_PORT_ATTR_ACTIVE_MTU,
            offset_of!(sys::ibv_port_attr, active_mtu),
            "ibv_port_attr.active_mtu",
        ),
        (
            item::ZCX_IBV_OFFSETOF_PORT_ATTR_LINK_LAYER,
            offset_of!(sys::ibv_port_attr, link_layer),
            "ibv_port_attr.link_layer",
        ),
        (item::ZCX_IBV_SIZEOF_DEVICE_ATTR, size_of::<sys::ibv_device_attr>(), "sizeof(ibv_device_attr)"),
        (
            item::ZCX_IBV_OFFSETOF_DEVICE_ATTR_ATOMIC_CAP,
            offset_of!(sys::ibv_device_attr, atomic_cap),
            "ibv_device_attr.atomic_cap",
        ),
        (item::ZCX_IBV_SIZEOF_GID, size_of::<sys::ibv_gid>(), "sizeof(ibv_gid)"),
        (item::ZCX_IBV_SIZEOF_MR, size_of::<sys::ibv_mr>(), "sizeof(ibv_mr)"),
        (item::ZCX_IBV_OFFSETOF_MR_RKEY, offset_of!(sys::ibv_mr, rkey), "ibv_mr.rkey"),
        (item::ZCX_IBV_SIZEOF_CONTEXT, size_of::<sys::ibv_context>(), "sizeof(ibv_context)"),
        (item::ZCX_IBV_OFFSETOF_CONTEXT_OPS, offset_of!(sys::ibv_context, ops), "ibv_context.ops"),
    ];
    for (item, rust, what) in expected {
        // SAFETY: the probe reads no memory; it returns a compile-time constant for `item`.
        let c = unsafe { sys::zcx_ibv_layout(item) };
        assert_eq!(rust, c, "{what}: Rust says {rust}, the C header {c}");
    }
    // SAFETY: as above; an item past the end is answered with all ones.
    assert_eq!(unsafe { sys::zcx_ibv_layout(item::ZCX_IBV_LAYOUT_ITEMS) }, usize::MAX);
}

/// The device list can be read and freed on any machine: empty here, rxe devices in the guest.
#[test]
fn the_device_list_is_read_and_freed() {
    if let Some(reason) = sys::VERBS_MISSING {
        println!("skipped: {reason}");
        return;
    }
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer; the list, if any, is freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut count) };
    if list.is_null() {
        let err = std::io::Error::last_os_error();
        println!("no verbs support in this kernel ({err}): an empty device list");
        return;
    }
    assert!(count >= 0);
    for i in 0..count as usize {
        // SAFETY: the list holds `count` device pointers followed by NULL.
        let device = unsafe { *list.add(i) };
        assert!(!device.is_null());
        // SAFETY: a device of the list, which is still held.
        let name = unsafe { std::ffi::CStr::from_ptr(sys::ibv_get_device_name(device)) };
        assert!(!name.to_bytes().is_empty());
    }
    // SAFETY: the list ends with NULL after `count` entries.
    assert!(unsafe { *list.add(count as usize) }.is_null());
    // SAFETY: the list came from ibv_get_device_list and is freed once.
    unsafe { sys::ibv_free_device_list(list) };
}
