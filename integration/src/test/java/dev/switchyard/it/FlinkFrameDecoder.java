package dev.switchyard.it;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.celeborn.common.network.protocol.Message;
import org.apache.celeborn.common.network.protocol.ReadData;
import org.apache.celeborn.common.network.protocol.TransportableError;
import org.apache.celeborn.common.network.util.FrameDecoder;
import org.apache.celeborn.shaded.io.netty.buffer.ByteBuf;
import org.apache.celeborn.shaded.io.netty.buffer.Unpooled;
import org.apache.celeborn.shaded.io.netty.channel.ChannelHandlerContext;
import org.apache.celeborn.shaded.io.netty.channel.ChannelInboundHandlerAdapter;

/**
 * The frame decoder of a Flink read connection, after Celeborn's Flink {@code
 * TransportFrameDecoderWithBufferSupplier} (0.5.4): 9-byte frame header ({@code i32 msgSize, u8
 * type, i32 bodySize}), then the message fields and the body. A READ_DATA body is copied into a
 * buffer taken from the supplier registered for its stream id (the Flink client copies it into a
 * network buffer of the handshake's buffer size from its credit pool); with no supplier the bytes
 * are dropped, as upstream (a body larger than that buffer, which upstream fails on, is reported to
 * the stream as a TransportableError). Every other type is decoded with the jar's {@link Message#decode} (the
 * common decoder knows no READ_DATA, which is why the Flink plugin has its own).
 *
 * <p>Unlike upstream, this accumulates a whole frame before decoding it (simpler; same result).
 */
final class FlinkFrameDecoder extends ChannelInboundHandlerAdapter implements FrameDecoder {

  private final Map<Long, Supplier<ByteBuf>> bufferSuppliers;
  private ByteBuf acc = Unpooled.buffer(64 * 1024);

  FlinkFrameDecoder(Map<Long, Supplier<ByteBuf>> bufferSuppliers) {
    this.bufferSuppliers = bufferSuppliers;
  }

  @Override
  public void channelRead(ChannelHandlerContext ctx, Object data) {
    ByteBuf in = (ByteBuf) data;
    try {
      acc.writeBytes(in);
    } finally {
      in.release();
    }
    while (acc.readableBytes() >= HEADER_SIZE) {
      int ri = acc.readerIndex();
      int msgSize = acc.getInt(ri);
      byte typeId = acc.getByte(ri + 4);
      int bodySize = acc.getInt(ri + 5);
      long frame = (long) msgSize + bodySize;
      if (msgSize < 0 || bodySize < 0 || frame <= 0 || frame >= Integer.MAX_VALUE) {
        throw new IllegalStateException("bad frame header: msgSize " + msgSize + ", type " + typeId
            + ", bodySize " + bodySize);
      }
      if (acc.readableBytes() < HEADER_SIZE + frame) {
        break;
      }
      acc.skipBytes(HEADER_SIZE);
      Message.Type type = Message.Type.decode(Unpooled.wrappedBuffer(new byte[] {typeId}));
      if (type == Message.Type.READ_DATA) {
        if (msgSize != 8) {
          throw new IllegalStateException("READ_DATA with msgSize " + msgSize + " (expected 8)");
        }
        long streamId = acc.readLong();
        Supplier<ByteBuf> supplier = bufferSuppliers.get(streamId);
        ByteBuf target = supplier == null ? null : supplier.get();
        if (target == null) {
          FlinkDriver.log("ReadData for stream %d (%d bytes) with no buffer for it: dropped", streamId, bodySize);
          acc.skipBytes(bodySize);
        } else if (bodySize > target.writableBytes()) {
          // A Flink network buffer cannot take it (upstream: IndexOutOfBoundsException in the copy).
          FlinkDriver.log("ReadData for stream %d of %d bytes > buffer of %d: dropped", streamId, bodySize,
              target.writableBytes());
          target.release();
          acc.skipBytes(bodySize);
          String error = "ReadData of " + bodySize + " bytes does not fit a network buffer of "
              + target.writableBytes() + " bytes (the handshake's bufferSize)";
          ctx.fireChannelRead(new TransportableError(streamId, error.getBytes(StandardCharsets.UTF_8)));
        } else {
          acc.readBytes(target, bodySize);
          ctx.fireChannelRead(new ReadData(streamId, target));
        }
      } else {
        ByteBuf frameBuf = Unpooled.buffer((int) frame);
        acc.readBytes(frameBuf, (int) frame);
        Message msg = Message.decode(type, frameBuf);
        if (msg.body() == null) {
          frameBuf.release();
        }
        ctx.fireChannelRead(msg);
      }
    }
    if (!acc.isReadable()) {
      acc.clear();
    } else if (acc.readerIndex() > acc.capacity() / 2) {
      acc.discardReadBytes();
    }
  }

  @Override
  public void handlerRemoved(ChannelHandlerContext ctx) throws Exception {
    if (acc != null) {
      acc.release();
      acc = null;
    }
    super.handlerRemoved(ctx);
  }
}
