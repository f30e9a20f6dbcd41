//! RPC layer tests.
//!
//! Where the bytes come from:
//! - "0.5.4 jar": `ObjectOutputStream.writeObject` of the real classes from
//!   `celeborn-client-spark-3-shaded_2.12-0.5.4.jar` (`TransportMessage` with its 0.5 field
//!   set, `RpcEndpointVerifier$CheckExistence`) and of `java.lang.Boolean` on OpenJDK 17;
//!   envelopes written with `DataOutputStream` exactly as `RequestMessage.serialize`
//!   (`NettyRpcEnv.scala`) does: `writeBoolean`/`writeUTF`/`writeInt` per address,
//!   `writeUTF(endpoint)`, then an `ObjectOutputStream` over the same stream.
//! - "0.6 stand-in": the same, with stand-in classes that have the 0.6+
//!   `TransportMessage` name, serialVersionUID and field set and the `SerdeVersion` enum.

use bytes::Bytes;

use super::*;
use crate::proto::{MessageType, PbCheckWorkersAvailableResponse, PbRequestSlots, PbReserveSlots};
use crate::transport_message::{SerdeVersion, TransportMessage};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `"…"` as the bytes of a `writeUTF`/`TC_STRING` body: u16 length + ASCII.
fn utf(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

const TM: &str = "org.apache.celeborn.common.network.protocol.TransportMessage";

/// Offsets inside [`two_field_desc`]: serialVersionUID, flags, first field type code.
const SUID_AT: usize = 4 + 2 + 2 + TM.len();
const FLAGS_AT: usize = SUID_AT + 8;
const FIRST_FIELD_TYPE_AT: usize = FLAGS_AT + 3;

/// Stream header + the 0.5 `TransportMessage` class descriptor, annotated with the
/// `ObjectOutputStream` method behind each part.
fn two_field_desc() -> Vec<u8> {
    cat(&[
        &hex("ACED 0005"),        // writeStreamHeader: STREAM_MAGIC, STREAM_VERSION
        &hex("73"),               // writeOrdinaryObject: TC_OBJECT
        &hex("72"),               // writeNonProxyDesc: TC_CLASSDESC (handle 0x7E0000)
        &utf(TM),                 // writeNonProxy: writeUTF(name)
        &hex("D2C5B3EDF7070F33"), //   writeLong(serialVersionUID) = -3259000920699629773
        &hex("02"),               //   flags SC_SERIALIZABLE
        &hex("0002"),             //   writeShort(fields.length): `type` is transient
        &hex("49"),
        &utf("messageTypeValue"), //   'I' field (primitives first)
        &hex("5B"),
        &utf("payload"), //   '[' field, then writeTypeString:
        &hex("74"),
        &utf("[B"), //     TC_STRING "[B" (handle 0x7E0001)
        &hex("78"), // annotateClass: TC_ENDBLOCKDATA
        &hex("70"), // superclass Object is not serializable: TC_NULL
    ])
}

/// `TransportMessage(REQUEST_SLOTS_RESPONSE=9, payload 08 00)` from the 0.5.4 jar, i.e. the
/// two-field reply form. The object itself is handle 0x7E0002.
fn two_field_reply() -> Vec<u8> {
    cat(&[
        &two_field_desc(),
        &hex("00000009"), // defaultWriteFields: messageTypeValue = 9
        &hex("75"),       // writeArray: TC_ARRAY
        &hex("72"),
        &utf("[B"), //   class descriptor of byte[] (handle 0x7E0003)
        &hex("ACF317F8060854E0 02 0000 78 70"),
        &hex("00000002 0800"), //   length + elements (array handle 0x7E0004)
    ])
}

#[test]
fn two_field_reply_matches_the_0_5_4_jar() {
    let jar = hex(
        "aced00057372003c6f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e6e6574776f726b2e
         70726f746f636f6c2e5472616e73706f72744d657373616765d2c5b3edf7070f330200024900106d657373
         6167655479706556616c75655b00077061796c6f61647400025b42787000000009757200025b42acf317f8
         060854e00200007870000000020800",
    );
    assert_eq!(two_field_reply(), jar);
    let reply = TransportMessage {
        message_type: MessageType::RequestSlotsResponse as i32,
        payload: Some(Bytes::from_static(&[8, 0])),
        serde_version: Some(SerdeVersion::V1), // never sent in a reply
    };
    assert_eq!(encode_reply(&reply).unwrap(), jar);
    // And it reads back.
    let RpcContent::TransportMessage(back) = RpcContent::decode(Bytes::from(jar)).unwrap() else {
        panic!()
    };
    assert_eq!(back.message_type, 9);
    assert_eq!(back.payload.as_deref(), Some(&[8u8, 0][..]));
    assert_eq!(back.serde_version, None);
}

/// `TransportMessage(ONE_WAY_MESSAGE_RESPONSE=40, null)` from the 0.5.4 jar: the array
/// becomes TC_NULL.
#[test]
fn null_payload_reply_matches_the_0_5_4_jar() {
    let jar = hex(
        "aced00057372003c6f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e6e6574776f726b2e
         70726f746f636f6c2e5472616e73706f72744d657373616765d2c5b3edf7070f330200024900106d657373
         6167655479706556616c75655b00077061796c6f61647400025b4278700000002870",
    );
    assert_eq!(jar, cat(&[&two_field_desc(), &hex("00000028 70")]));
    let reply = TransportMessage::without_payload(MessageType::OneWayMessageResponse);
    assert_eq!(encode_reply(&reply).unwrap(), jar);
    assert_eq!(
        RpcContent::decode(Bytes::from(jar)).unwrap(),
        RpcContent::TransportMessage(reply)
    );
}

/// An empty protobuf (`PbCheckWorkersAvailable{}`) is an empty array, not null.
#[test]
fn empty_payload_matches_the_0_5_4_jar() {
    // 0.5.4 jar: TransportMessage(CHECK_WORKERS_AVAILABLE, PbCheckWorkersAvailable{}.toByteArray())
    let jar = cat(&[
        &two_field_desc(),
        &hex("00000035 757200025b42acf317f8060854e0020000787000000000"),
    ]);
    let tm = TransportMessage {
        message_type: MessageType::CheckWorkersAvailable as i32,
        payload: Some(Bytes::new()),
        serde_version: None,
    };
    assert_eq!(encode_reply(&tm).unwrap(), jar);
    assert_eq!(
        RpcContent::decode(Bytes::from(jar)).unwrap(),
        RpcContent::TransportMessage(tm)
    );
}

/// The 0.6+ three-field form (0.6 stand-in), annotated.
fn three_field_request() -> Vec<u8> {
    cat(&[
        &hex("ACED 0005 73 72"),
        &utf(TM),
        &hex("D2C5B3EDF7070F33 02 0003"),
        &hex("49"),
        &utf("messageTypeValue"),
        &hex("5B"),
        &utf("payload"),
        &hex("74"),
        &utf("[B"), // handle 0x7E0001
        &hex("4C"),
        &utf("serdeVersion"), // 'L' field, signature string (handle 0x7E0002):
        &hex("74"),
        &utf("Lorg/apache/celeborn/common/network/protocol/SerdeVersion;"),
        &hex("78 70"),
        &hex("00000014"), // messageTypeValue = 20
        &hex("75 72"),
        &utf("[B"),
        &hex("ACF317F8060854E0 02 0000 78 70 00000005 0A03616263"),
        &hex("7E"), // writeEnum: TC_ENUM, then the enum's descriptor chain:
        &hex("72"),
        &utf("org.apache.celeborn.common.network.protocol.SerdeVersion"),
        &hex("0000000000000000 12 0000 78"), // SUID 0, SC_SERIALIZABLE|SC_ENUM, no fields
        &hex("72"),
        &utf("java.lang.Enum"),
        &hex("0000000000000000 12 0000 78 70"),
        &hex("74"),
        &utf("V1"), // writeString(constant name)
    ])
}

#[test]
fn three_field_form_matches_the_0_6_stand_in() {
    let stand_in = hex(
        "aced00057372003c6f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e6e6574776f726b2e
         70726f746f636f6c2e5472616e73706f72744d657373616765d2c5b3edf7070f330200034900106d657373
         6167655479706556616c75655b00077061796c6f61647400025b424c000c736572646556657273696f6e74
         003a4c6f72672f6170616368652f63656c65626f726e2f636f6d6d6f6e2f6e6574776f726b2f70726f746f
         636f6c2f536572646556657273696f6e3b787000000014757200025b42acf317f8060854e0020000787000
         0000050a036162637e7200386f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e6e657477
         6f726b2e70726f746f636f6c2e536572646556657273696f6e00000000000000001200007872000e6a6176
         612e6c616e672e456e756d000000000000000012000078707400025631",
    );
    assert_eq!(three_field_request(), stand_in);
    let tm = TransportMessage {
        message_type: MessageType::HeartbeatFromApplication as i32,
        payload: Some(Bytes::from_static(&[0x0a, 3, b'a', b'b', b'c'])),
        serde_version: Some(SerdeVersion::V1),
    };
    let content = RpcContent::TransportMessage(tm);
    assert_eq!(
        RpcContent::decode(Bytes::from(stand_in.clone())).unwrap(),
        content
    );
    assert_eq!(content.encode().unwrap(), stand_in);
}

/// `CheckExistence("MasterEndpoint")` from the 0.5.4 jar (a Scala case class:
/// `@SerialVersionUID(492543523453L)`, one `String name` field).
#[test]
fn check_existence_matches_the_0_5_4_jar() {
    let jar = cat(&[
        &hex("ACED0005 73 72"),
        &utf("org.apache.celeborn.common.rpc.netty.RpcEndpointVerifier$CheckExistence"),
        &hex("00000072ADE1BA7D 02 0001 4C"),
        &utf("name"),
        &hex("74"),
        &utf("Ljava/lang/String;"),
        &hex("78 70 74"),
        &utf("MasterEndpoint"),
    ]);
    assert_eq!(
        jar,
        hex(
            "aced0005737200476f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e7270632e6e65
             7474792e527063456e64706f696e74566572696669657224436865636b4578697374656e636500000072
             ade1ba7d0200014c00046e616d657400124c6a6176612f6c616e672f537472696e673b787074000e4d61
             73746572456e64706f696e74"
        )
    );
    let content = RpcContent::CheckExistence {
        name: "MasterEndpoint".into(),
    };
    assert_eq!(
        RpcContent::decode(Bytes::from(jar.clone())).unwrap(),
        content
    );
    assert_eq!(content.encode().unwrap(), jar);
}

/// `Boolean.TRUE` / `Boolean.FALSE` (OpenJDK 17).
#[test]
fn boolean_reply_matches_java() {
    let t = hex(
        "ACED0005 73 72 0011 6A6176612E6C616E672E426F6F6C65616E CD207280D59CFAEE 02 0001
         5A 0005 76616C7565 78 70 01",
    );
    assert_eq!(encode_boolean(true), t);
    let mut f = t.clone();
    *f.last_mut().unwrap() = 0;
    assert_eq!(encode_boolean(false), f);
    assert_eq!(
        RpcContent::decode(Bytes::from(t)).unwrap(),
        RpcContent::Boolean(true)
    );
    assert_eq!(
        RpcContent::decode(Bytes::from(f)).unwrap(),
        RpcContent::Boolean(false)
    );
}

/// Example (e) of our notes: the whole RPC_REQUEST body of the verifier ask, as the 0.5.4
/// classes write it (188 bytes = 0xBC, the notes' body length).
#[test]
fn verifier_ask_envelope() {
    let body = hex(
        "0100093132372e302e302e3100009c400100096c6f63616c686f7374000023890011656e64706f696e742d
         7665726966696572aced0005737200476f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e
         7270632e6e657474792e527063456e64706f696e74566572696669657224436865636b4578697374656e63
         6500000072ade1ba7d0200014c00046e616d657400124c6a6176612f6c616e672f537472696e673b787074
         000e4d6173746572456e64706f696e74",
    );
    assert_eq!(body.len(), 0xBC);
    let expected = RequestMessage {
        sender: Some(RpcAddress {
            host: "127.0.0.1".into(),
            port: 40000,
        }),
        receiver: Some(RpcAddress {
            host: "localhost".into(),
            port: 9097,
        }),
        endpoint: endpoint::VERIFIER.into(),
        content: RpcContent::CheckExistence {
            name: endpoint::MASTER.into(),
        },
    };
    assert_eq!(
        RequestMessage::decode(Bytes::from(body.clone())).unwrap(),
        expected
    );
    assert_eq!(expected.encode().unwrap(), body);
}

/// A 0.5 ask from an RpcEnv without a listening address (sender absent), carrying a real
/// `PbRequestSlots` built with the jar's own protobuf classes: checks our proto too.
#[test]
fn request_slots_ask_from_the_0_5_4_jar() {
    let body = hex(
        "000100096c6f63616c686f737400002389000e4d6173746572456e64706f696e74aced00057372003c6f72
         672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e6e6574776f726b2e70726f746f636f6c2e54
         72616e73706f72744d657373616765d2c5b3edf7070f330200024900106d6573736167655479706556616c
         75655b00077061796c6f61647400025b42787000000006757200025b42acf317f8060854e0020000787000
         00004b0a136c6f63616c2d3137303030303030303030303010031a03000102220b6472697665722d686f73
         7432057265712d3142120a0764656661756c74120764656661756c7450904e58026801",
    );
    let request = RequestMessage::decode(Bytes::from(body.clone())).unwrap();
    assert_eq!(request.sender, None);
    assert_eq!(request.endpoint, endpoint::MASTER);
    let RpcContent::TransportMessage(tm) = &request.content else {
        panic!()
    };
    assert_eq!(tm.kind(), Some(MessageType::RequestSlots));
    let pb: PbRequestSlots = tm.decode_payload().unwrap();
    assert_eq!(pb.application_id, "local-1700000000000");
    assert_eq!(pb.shuffle_id, 3);
    assert_eq!(pb.partition_id_list, [0, 1, 2]);
    assert_eq!(pb.hostname, "driver-host");
    assert_eq!(pb.request_id, "req-1");
    let user = pb.user_identifier.as_ref().unwrap();
    assert_eq!(
        (user.tenant_id.as_str(), user.name.as_str()),
        ("default", "default")
    );
    assert_eq!(
        (pb.max_workers, pb.available_storage_types, pb.packed),
        (10000, 2, true)
    );
    // Re-encoding reproduces the client's bytes (0.5 form, since serde_version is absent).
    assert_eq!(request.encode().unwrap(), body);
    use prost::Message as _;
    assert_eq!(pb.encode_to_vec(), tm.payload.clone().unwrap());
}

/// `PbReserveSlots` with packed locations as the 0.5.4 LifecycleManager builds them.
#[test]
fn reserve_slots_payload_from_the_0_5_4_jar() {
    let bytes = hex(
        "0a136c6f63616c2d3137303030303030303030303010032880808080044a120a0764656661756c74120764
         656661756c7450c0a907580160026a5f0a4f0a020001120200001a0200002219686f7374313a393039383a
         393039393a393130303a393130312a002a00320201013a020000420a2f6d6e742f6469736b314a02000052
         0052005a02020262020000120affffffff07ffffffff071802",
    );
    use prost::Message as _;
    let pb = PbReserveSlots::decode(&bytes[..]).unwrap();
    assert_eq!(pb.split_threshold, 1 << 30);
    assert!(pb.partition_split_enabled);
    assert_eq!(pb.push_data_timeout, 120_000);
    let pair = pb.partition_locations_pair.as_ref().unwrap();
    assert_eq!(pair.input_location_size, 2);
    assert_eq!(pair.peer_indexes, [i32::MAX, i32::MAX]);
    let locs = pair.locations.as_ref().unwrap();
    assert_eq!(locs.ids, [0, 1]);
    assert_eq!(locs.worker_ids_set, ["host1:9098:9099:9100:9101"]);
    assert_eq!(locs.mount_points_set, ["/mnt/disk1"]);
    assert_eq!(locs.types, [1, 1]);
    assert!(locs.file_sizes.is_empty() && locs.chunks_offsets.is_empty());
    assert_eq!(pb.encode_to_vec(), bytes);
}

/// A 0.6+ ask (0.6 stand-in): REGISTER_APPLICATION_INFO with `serdeVersion = V1`.
#[test]
fn register_application_info_ask_from_a_0_6_client() {
    let body = hex(
        "01000831302e302e302e35000095430100066d617374657200002389000e4d6173746572456e64706f696e
         74aced00057372003c6f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e6e6574776f726b
         2e70726f746f636f6c2e5472616e73706f72744d657373616765d2c5b3edf7070f330200034900106d6573
         736167655479706556616c75655b00077061796c6f61647400025b424c000c736572646556657273696f6e
         74003a4c6f72672f6170616368652f63656c65626f726e2f636f6d6d6f6e2f6e6574776f726b2f70726f74
         6f636f6c2f536572646556657273696f6e3b787000000060757200025b42acf317f8060854e00200007870
         000000050a036170707e7200386f72672e6170616368652e63656c65626f726e2e636f6d6d6f6e2e6e6574
         776f726b2e70726f746f636f6c2e536572646556657273696f6e0000000000000000120000787200
         0e6a6176612e6c616e672e456e756d000000000000000012000078707400025631",
    );
    let request = RequestMessage::decode(Bytes::from(body.clone())).unwrap();
    assert_eq!(
        request.sender,
        Some(RpcAddress {
            host: "10.0.0.5".into(),
            port: 38211
        })
    );
    let RpcContent::TransportMessage(tm) = &request.content else {
        panic!()
    };
    assert_eq!(tm.kind(), Some(MessageType::RegisterApplicationInfo));
    assert_eq!(tm.serde_version, Some(SerdeVersion::V1));
    assert_eq!(request.encode().unwrap(), body);
}

/// V2 content: `0xFF, i32 type, i32 length, payload` (`JavaSerializerInstance.deserialize`).
#[test]
fn v2_content() {
    let bytes = hex("FF 00000035 00000002 0801");
    let tm = TransportMessage {
        message_type: MessageType::CheckWorkersAvailable as i32,
        payload: Some(Bytes::from_static(&[8, 1])),
        serde_version: Some(SerdeVersion::V2),
    };
    let content = RpcContent::TransportMessage(tm);
    assert_eq!(
        RpcContent::decode(Bytes::from(bytes.clone())).unwrap(),
        content
    );
    assert_eq!(content.encode().unwrap(), bytes);
    for bad in [
        "FF 00000035",
        "FF 00000035 00000003 0801",
        "FF 00000035 FFFFFFFF",
        "FF 00000035 00000001 0801",
    ] {
        assert!(RpcContent::decode(Bytes::from(hex(bad))).is_err(), "{bad}");
    }
}

#[test]
fn replies_decode_with_their_payload() {
    let reply = TransportMessage::new(
        MessageType::CheckWorkersAvailableResponse,
        &PbCheckWorkersAvailableResponse { available: true },
    );
    let bytes = encode_reply(&reply).unwrap();
    let RpcContent::TransportMessage(back) = RpcContent::decode(bytes).unwrap() else {
        panic!()
    };
    let pb: PbCheckWorkersAvailableResponse = back.decode_payload().unwrap();
    assert!(pb.available);
}

/// Back-references and TC_RESET, which our writer never emits but Java may: the second
/// `[B` (array class name) here is a reference to the field signature string. Also a
/// 0.3-style `type` enum field: ignored unless messageTypeValue is 0.
#[test]
fn references_reset_and_legacy_type_field() {
    let mut stream = hex("ACED0005 79 73 72"); // reset before the object
    stream.extend(utf(TM));
    stream.extend(hex("D2C5B3EDF7070F33 02 0003"));
    stream.extend(hex("49"));
    stream.extend(utf("messageTypeValue"));
    stream.extend(hex("5B"));
    stream.extend(utf("payload"));
    stream.extend(hex("74"));
    stream.extend(utf("[B")); // handle 0x7E0001
    stream.extend(hex("4C"));
    stream.extend(utf("type"));
    stream.extend(hex("74"));
    stream.extend(utf("Lorg/apache/celeborn/common/protocol/MessageType;")); // 0x7E0002
    stream.extend(hex("78 70"));
    // object = 0x7E0003
    stream.extend(hex("00000000")); // messageTypeValue 0 -> use `type`
    stream.extend(hex("75 72")); // array class desc 0x7E0004
    stream.extend(utf("[B"));
    stream.extend(hex("ACF317F8060854E0 02 0000 78 70 00000000")); // array 0x7E0005
    stream.extend(hex("7E 72"));
    stream.extend(utf("org.apache.celeborn.common.protocol.MessageType")); // 0x7E0006
    stream.extend(hex("0000000000000000 12 0000 78 72"));
    stream.extend(utf("java.lang.Enum")); // 0x7E0007
    stream.extend(hex("0000000000000000 12 0000 78 70"));
    stream.extend(hex("74")); // enum 0x7E0008, name 0x7E0009
    stream.extend(utf("CHECK_QUOTA"));
    let RpcContent::TransportMessage(tm) = RpcContent::decode(Bytes::from(stream.clone())).unwrap()
    else {
        panic!()
    };
    assert_eq!(tm.kind(), Some(MessageType::CheckQuota));

    // A CheckExistence whose name is a back-reference to its own signature string.
    let mut by_ref = hex("ACED0005 73 72");
    by_ref.extend(utf(
        "org.apache.celeborn.common.rpc.netty.RpcEndpointVerifier$CheckExistence",
    ));
    by_ref.extend(hex("00000072ADE1BA7D 02 0001 4C"));
    by_ref.extend(utf("name"));
    by_ref.extend(hex("74"));
    by_ref.extend(utf("Ljava/lang/String;")); // 0x7E0001
    by_ref.extend(hex("78 70 71 007E0001"));
    assert_eq!(
        RpcContent::decode(Bytes::from(by_ref)).unwrap(),
        RpcContent::CheckExistence {
            name: "Ljava/lang/String;".into()
        }
    );
}

#[test]
fn malformed_and_unsupported_contents_are_typed_errors() {
    let good = two_field_reply();
    let check = |bytes: Vec<u8>, ok: fn(&RpcError) -> bool| {
        let err = RpcContent::decode(Bytes::from(bytes.clone())).unwrap_err();
        assert!(ok(&err), "{bytes:02x?}: {err}");
    };
    // Every truncation of a valid stream.
    for cut in 0..good.len() {
        assert!(
            RpcContent::decode(Bytes::copy_from_slice(&good[..cut])).is_err(),
            "cut {cut}"
        );
    }
    // Trailing garbage.
    check([&good[..], &[0]].concat(), |e| {
        matches!(e, RpcError::TrailingBytes(1))
    });
    // Wrong magic / version.
    check(hex("ACEE0005 70"), |e| {
        matches!(e, RpcError::BadStreamHeader(0xAC))
    });
    check(hex("ACED0004 70"), |e| {
        matches!(e, RpcError::BadStreamHeader(0xAC))
    });
    // Null top-level object, a bare string.
    check(hex("ACED0005 70"), |e| {
        matches!(e, RpcError::UnexpectedClass(_))
    });
    check(cat(&[&hex("ACED0005 74"), &utf("x")]), |e| {
        matches!(e, RpcError::UnexpectedClass(_))
    });
    // Wrong serialVersionUID.
    let mut suid = good.clone();
    suid[SUID_AT + 7] ^= 1;
    check(suid, |e| matches!(e, RpcError::SuidMismatch { .. }));
    // A class with a writeObject method (flags 0x03), e.g. an exception.
    let mut write_method = good.clone();
    write_method[FLAGS_AT] = 0x03;
    check(write_method, |e| matches!(e, RpcError::Unsupported(_)));
    // Unknown class.
    let mut other = cat(&[&hex("ACED0005 73 72"), &utf("java.util.Date")]);
    other.extend(hex("686A81014B597419 03 0000 78 70"));
    check(other, |e| matches!(e, RpcError::Unsupported(_)));
    // Reference to a handle that does not exist, and to the object being read (a cycle).
    check(hex("ACED0005 71 007E0005"), |e| {
        matches!(e, RpcError::BadReference(_))
    });
    check(hex("ACED0005 71 00000000"), |e| {
        matches!(e, RpcError::BadReference(_))
    });
    let mut cycle = two_field_desc();
    cycle.extend(hex("00000009 71 007E0002")); // payload field -> the object itself
    check(cycle, |e| matches!(e, RpcError::BadReference(0x7E0002)));
    // Arrays of anything but byte.
    let mut ints = two_field_desc();
    ints.extend(hex("00000009 75 72"));
    ints.extend(utf("[I"));
    ints.extend(hex("4DBA602676EAB2A5 02 0000 78 70 00000000"));
    check(ints, |e| matches!(e, RpcError::Unsupported(_)));
    // Array length beyond the input.
    let mut long_array = good.clone();
    let n = long_array.len();
    long_array[n - 6..n - 2].copy_from_slice(&hex("7FFFFFFF"));
    check(long_array, |e| matches!(e, RpcError::BadLength { .. }));
    // Proxy classes, block data, exceptions, Class objects.
    for code in ["7D", "77", "7B", "76", "72"] {
        check(hex(&format!("ACED0005 {code} 00")), |e| {
            matches!(
                e,
                RpcError::Unsupported(_)
                    | RpcError::UnexpectedTypeCode { .. }
                    | RpcError::Truncated { .. }
            )
        });
    }
    // Field type that is not a Java type code.
    let mut bad_type = good.clone();
    bad_type[FIRST_FIELD_TYPE_AT] = b'Q';
    check(bad_type, |e| {
        matches!(
            e,
            RpcError::UnexpectedTypeCode {
                context: "field type",
                ..
            }
        )
    });
    // Payload of the wrong type (an int array handle reused as payload is covered above);
    // a string in the payload slot:
    let mut string_payload = two_field_desc();
    string_payload.extend(hex("00000009 74"));
    string_payload.extend(utf("x"));
    check(string_payload, |e| {
        matches!(
            e,
            RpcError::BadField {
                field: "payload",
                ..
            }
        )
    });
    // Unknown SerdeVersion constant.
    let mut v3 = three_field_request();
    let n = v3.len();
    v3[n - 1] = b'3';
    check(v3, |e| matches!(e, RpcError::UnknownEnumConstant { .. }));
    // Invalid modified UTF-8 in a string.
    check(hex("ACED0005 74 0001 80"), |e| {
        matches!(e, RpcError::InvalidUtf { .. })
    });
    // Empty content.
    check(Vec::new(), |e| matches!(e, RpcError::Truncated { .. }));
}

#[test]
fn nesting_and_handle_limits() {
    // Deeply nested superclass chain: each descriptor's super is another new descriptor.
    let mut deep = hex("ACED0005 73");
    for i in 0..40 {
        deep.extend(hex("72"));
        deep.extend(utf(&format!("C{i}")));
        deep.extend(hex("0000000000000001 02 0000 78"));
    }
    deep.extend(hex("70"));
    let err = RpcContent::decode(Bytes::from(deep)).unwrap_err();
    assert!(matches!(err, RpcError::TooDeep(_)), "{err}");

    // More fields than allowed.
    let mut wide = cat(&[&hex("ACED0005 73 72"), &utf("W")]);
    wide.extend(hex("0000000000000001 02 FFFF"));
    let err = RpcContent::decode(Bytes::from(wide)).unwrap_err();
    assert!(
        matches!(err, RpcError::TooManyFields { count: 65535, .. }),
        "{err}"
    );

    // Many handles: a class with 60 object fields, each a new string.
    let mut many = cat(&[&hex("ACED0005 73 72"), &utf("M")]);
    many.extend(hex("0000000000000001 02 003C"));
    for i in 0..60 {
        many.extend(hex("4C"));
        many.extend(utf(&format!("f{i}")));
        many.extend(hex("74"));
        many.extend(utf(&format!("Lx{i};")));
    }
    many.extend(hex("78 70"));
    for i in 0..60 {
        many.extend(hex("74"));
        many.extend(utf(&"s".repeat(i % 3 + 1)));
    }
    // 60 signatures + class + object + 60 values = 122 handles: allowed, then the class
    // is simply not one we map.
    let err = RpcContent::decode(Bytes::from(many)).unwrap_err();
    assert!(
        matches!(err, RpcError::UnexpectedClass(ref c) if c == "M"),
        "{err}"
    );
}

#[test]
fn envelope_errors() {
    for bad in [
        "",                       // no sender flag
        "01",                     // sender host missing
        "01 0003 616263",         // sender port missing
        "00 00",                  // endpoint name missing
        "00 00 0005 6162",        // endpoint name truncated
        "00 00 0001 61",          // no content
        "00 00 0001 61 ACED0005", // truncated content
    ] {
        assert!(
            RequestMessage::decode(Bytes::from(hex(bad))).is_err(),
            "{bad:?}"
        );
    }
    let long = RequestMessage {
        sender: None,
        receiver: None,
        endpoint: "x".repeat(70_000),
        content: RpcContent::Boolean(true),
    };
    assert!(matches!(
        long.encode(),
        Err(RpcError::TooLargeToEncode { .. })
    ));
}

#[test]
fn arbitrary_input_never_panics() {
    use proptest::prelude::*;
    proptest!(|(bytes in prop::collection::vec(any::<u8>(), 0..300), splice in 0usize..300)| {
        let _ = RequestMessage::decode(Bytes::from(bytes.clone()));
        // Also mutate a valid stream at one position.
        let mut good = three_field_request();
        let i = splice % good.len();
        good[i] = bytes.first().copied().unwrap_or(0);
        let _ = RpcContent::decode(Bytes::from(good));
    });
}

/// The amplifier of the hardening review: one holder object whose 64 fields
/// are objects of 64 classes, each class declared once and chained to the
/// previous one by back-reference, so object `i` has `64 × (i + 1)` fields.
/// `name_len` is the length of every field name.
fn chained_classes(name_len: usize) -> Vec<u8> {
    const CLASSES: usize = 64;
    let mut s = cat(&[&hex("ACED0005 73 72"), &utf("H")]);
    s.extend(hex("0000000000000001 02 0040"));
    for i in 0..CLASSES {
        s.extend(hex("4C"));
        s.extend(utf(&format!("h{i}")));
        s.extend(hex("74"));
        s.extend(utf("Ljava/lang/Object;"));
    }
    s.extend(hex("78 70"));
    // Handles so far: H's descriptor, 64 signatures, the holder object.
    let mut next_handle = 0x7E0000 + 1 + CLASSES as u32 + 1;
    let mut previous: Option<u32> = None;
    for i in 0..CLASSES {
        s.extend(hex("73 72"));
        s.extend(utf(&format!("C{i}")));
        s.extend(hex("0000000000000001"));
        let desc = next_handle;
        s.extend(hex("02 0040"));
        for f in 0..64 {
            s.push(b'B');
            let mut name = format!("{i}.{f}.");
            name.extend(std::iter::repeat_n(
                'n',
                name_len.saturating_sub(name.len()),
            ));
            s.extend(utf(&name));
        }
        s.extend(hex("78"));
        match previous {
            Some(handle) => {
                s.extend(hex("71"));
                s.extend(handle.to_be_bytes());
            }
            None => s.extend(hex("70")),
        }
        // The object's own handle, then one byte per field of its chain.
        next_handle += 2;
        s.extend(std::iter::repeat_n(7u8, 64 * (i + 1)));
        previous = Some(desc);
    }
    s
}

#[test]
fn chained_class_amplifier_stops_at_the_stream_budget() {
    use crate::rpc::javaser::read::{read_counted, MAX_BUILT_BYTES, MAX_TOTAL_FIELDS};
    // Long names: 16 MiB of input that used to clone each 4 KiB name once
    // per field per object (64 × 2080 fields: ~545 MB). The names of the
    // first four classes pass the byte budget now.
    let long = chained_classes(4096);
    assert!(long.len() > 16 << 20);
    let (result, built) = read_counted(Bytes::from(long));
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            RpcError::DecodeBudget {
                what: "bytes built",
                ..
            }
        ),
        "{err}"
    );
    assert!(built <= MAX_BUILT_BYTES, "{built} bytes built");
    assert!(err.to_string().contains("decode budget"), "{err}");

    // Short names: little to build per field, but 133,120 field values
    // (~48 B each decoded, from 1 input byte each) pass the field budget.
    let short = chained_classes(8);
    let (result, built) = read_counted(Bytes::from(short));
    let err = result.unwrap_err();
    assert!(
        matches!(err, RpcError::DecodeBudget { what: "field values", limit } if limit == MAX_TOTAL_FIELDS),
        "{err}"
    );
    // What the fields that were allowed built, plus the descriptors.
    assert!(built < 256 * 1024, "{built} bytes built");
}

#[test]
fn field_names_are_shared_between_objects_of_one_class() {
    use crate::rpc::javaser::read::{read_counted, Value};
    // A holder with two fields, both objects of class P (declared once,
    // then referenced); P has one int field `x`.
    let mut s = cat(&[&hex("ACED0005 73 72"), &utf("H")]);
    s.extend(hex("0000000000000001 02 0002"));
    for f in ["a", "b"] {
        s.extend(hex("4C"));
        s.extend(utf(f));
        s.extend(hex("74"));
        s.extend(utf("LP;"));
    }
    s.extend(hex("78 70"));
    // Handles: 0 H, 1-2 signatures, 3 holder, 4 P, 5 first P object.
    s.extend(hex("73 72"));
    s.extend(utf("P"));
    s.extend(hex("0000000000000001 02 0001 49"));
    s.extend(utf("x"));
    s.extend(hex("78 70 00000001"));
    s.extend(hex("73 71 007E0004 00000002"));
    let (value, _) = read_counted(Bytes::from(s));
    let Value::Object(holder) = value.unwrap() else {
        panic!("not an object");
    };
    let name = |field: &str| match holder.field(field) {
        Some(Value::Object(p)) => {
            assert!(matches!(p.field("x"), Some(Value::Int(_))));
            p.fields[0].0.clone()
        }
        other => panic!("{other:?}"),
    };
    let (a, b) = (name("a"), name("b"));
    assert!(std::sync::Arc::ptr_eq(&a, &b), "one name, shared");
}
