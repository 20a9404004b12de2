package dev.edgekit.sdk;

import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * One kept-alive HTTP/1.1 connection to the agent over a plain {@link Socket}: a request goes out in one write
 * when it is small (in 64 KiB blocks otherwise), and an answer is read with {@code Content-Length} only, which is
 * all the agent sends.
 */
final class HttpConnection implements Closeable {
    static final int BLOCK = 65536;
    private static final int MAX_LINE = 65536;
    private static final int MAX_HEADERS = 100;

    /** An answer: status, headers (names lower-cased) and body. */
    static final class Response {
        final int status;
        final Map<String, String> headers;
        final ByteBuffer body;

        Response(int status, Map<String, String> headers, ByteBuffer body) {
            this.status = status;
            this.headers = headers;
            this.body = body;
        }
    }

    /** The connection failed before any byte of the answer arrived (a kept-alive one may be retried). */
    static final class StaleConnection extends IOException {
        private static final long serialVersionUID = 1L;

        StaleConnection(String message, Throwable cause) {
            super(message, cause);
        }
    }

    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;
    private final byte[] buf = new byte[BLOCK];
    private int start;
    private int end;

    HttpConnection(String host, int port, int connectTimeoutMs) throws IOException {
        socket = new Socket();
        try {
            socket.setTcpNoDelay(true);
            socket.connect(new InetSocketAddress(host, port), connectTimeoutMs);
            in = socket.getInputStream();
            out = socket.getOutputStream();
        } catch (IOException e) {
            socket.close();
            throw e;
        }
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException e) {
            // nothing left to release
        }
    }

    /**
     * Sends {@code head} then {@code body} (a prefix and buffers, either may be null), reads the answer. Throws
     * {@link StaleConnection} when the connection failed before any byte of the answer was read.
     */
    Response exchange(byte[] head, byte[] prefix, ByteBuffer[] payloads, long length, int readTimeoutMs,
            boolean directBody) throws IOException {
        socket.setSoTimeout(readTimeoutMs);
        try {
            send(head, prefix, payloads, length);
            if (!fill()) {
                throw new EOFException("the agent closed the connection");
            }
        } catch (java.net.SocketTimeoutException e) {
            throw e;
        } catch (IOException e) {
            throw new StaleConnection(e.getMessage() == null ? e.toString() : e.getMessage(), e);
        }
        String statusLine = line();
        String[] parts = statusLine.split(" ", 3);
        if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
            throw new IOException("not an HTTP response: " + abbreviate(statusLine));
        }
        int status;
        try {
            status = Integer.parseInt(parts[1]);
        } catch (NumberFormatException e) {
            throw new IOException("not an HTTP response: " + abbreviate(statusLine));
        }
        Map<String, String> headers = new HashMap<String, String>();
        for (int i = 0;; i++) {
            String line = line();
            if (line.isEmpty()) {
                break;
            }
            if (i >= MAX_HEADERS) {
                throw new IOException("the answer has more than " + MAX_HEADERS + " headers");
            }
            int colon = line.indexOf(':');
            if (colon > 0) {
                headers.put(line.substring(0, colon).trim().toLowerCase(java.util.Locale.ROOT),
                        line.substring(colon + 1).trim());
            }
        }
        if (headers.containsKey("transfer-encoding")) {
            throw new IOException("the answer uses Transfer-Encoding, which this client does not read");
        }
        long n;
        try {
            n = Long.parseLong(headers.containsKey("content-length") ? headers.get("content-length") : "0");
        } catch (NumberFormatException e) {
            throw new IOException("bad Content-Length in the answer: " + headers.get("content-length"));
        }
        if (n < 0 || n > Integer.MAX_VALUE - 8) {
            throw new IOException("answer of " + n + " bytes is beyond what this client reads");
        }
        return new Response(status, headers, body((int) n, directBody));
    }

    private void send(byte[] head, byte[] prefix, ByteBuffer[] payloads, long length) throws IOException {
        long total = head.length + length;
        if (total <= BLOCK) { // one write, one segment
            byte[] all = new byte[(int) total];
            int at = copy(head, all, 0);
            at = prefix == null ? at : copy(prefix, all, at);
            if (payloads != null) {
                for (ByteBuffer p : payloads) {
                    int r = p.remaining();
                    p.duplicate().get(all, at, r);
                    at += r;
                }
            }
            out.write(all, 0, at);
            return;
        }
        out.write(head);
        if (prefix != null) {
            out.write(prefix);
        }
        if (payloads != null) {
            byte[] block = new byte[BLOCK];
            for (ByteBuffer p : payloads) {
                ByteBuffer src = p.duplicate();
                while (src.hasRemaining()) {
                    int r = Math.min(block.length, src.remaining());
                    src.get(block, 0, r);
                    out.write(block, 0, r);
                }
            }
        }
    }

    private static int copy(byte[] src, byte[] dst, int at) {
        System.arraycopy(src, 0, dst, at, src.length);
        return at + src.length;
    }

    /** Reads more into the buffer; false at the end of the stream. */
    private boolean fill() throws IOException {
        if (start == end) {
            start = 0;
            end = 0;
        }
        if (end == buf.length) {
            return true;
        }
        int r = in.read(buf, end, buf.length - end);
        if (r < 0) {
            return false;
        }
        end += r;
        return true;
    }

    /** One header line without its line break (ISO-8859-1). */
    private String line() throws IOException {
        StringBuilder sb = new StringBuilder();
        while (true) {
            for (int i = start; i < end; i++) {
                if (buf[i] == '\n') {
                    int stop = i > start && buf[i - 1] == '\r' ? i - 1 : i;
                    sb.append(new String(buf, start, stop - start, StandardCharsets.ISO_8859_1));
                    start = i + 1;
                    return sb.toString();
                }
            }
            sb.append(new String(buf, start, end - start, StandardCharsets.ISO_8859_1));
            start = end;
            if (sb.length() > MAX_LINE) {
                throw new IOException("a header line of the answer is longer than " + MAX_LINE + " bytes");
            }
            if (!fill()) {
                throw new EOFException("the answer ended inside its headers");
            }
        }
    }

    private ByteBuffer body(int n, boolean direct) throws IOException {
        ByteBuffer body = direct ? ByteBuffer.allocateDirect(n) : ByteBuffer.allocate(n);
        body.order(ByteOrder.LITTLE_ENDIAN);
        int buffered = Math.min(n, end - start);
        body.put(buf, start, buffered);
        start += buffered;
        while (body.hasRemaining()) {
            if (!body.isDirect()) {
                int r = in.read(body.array(), body.position(), body.remaining());
                if (r < 0) {
                    throw new EOFException("answer ended after " + body.position() + " of " + n + " bytes");
                }
                body.position(body.position() + r);
                continue;
            }
            int r = in.read(buf, 0, Math.min(buf.length, body.remaining()));
            if (r < 0) {
                throw new EOFException("answer ended after " + body.position() + " of " + n + " bytes");
            }
            body.put(buf, 0, r);
        }
        body.flip();
        return body;
    }

    private static String abbreviate(String s) {
        return s.length() > 80 ? s.substring(0, 80) + "..." : s;
    }
}
