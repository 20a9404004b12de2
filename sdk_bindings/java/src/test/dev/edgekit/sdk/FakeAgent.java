package dev.edgekit.sdk;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;

/**
 * A scripted HTTP server on loopback for the client's unit tests: each accepted connection is handed to the
 * script on its own thread; the script reads requests and writes whatever bytes the test needs.
 */
final class FakeAgent implements AutoCloseable {
    interface Script {
        void serve(Conn conn, int index) throws Exception;
    }

    /** One request as received: the head (request line and headers) and the body. */
    static final class Request {
        final String head;
        final byte[] body;

        Request(String head, byte[] body) {
            this.head = head;
            this.body = body;
        }
    }

    /** One accepted connection. */
    static class Conn {
        final Socket socket;
        private final InputStream in;
        private final OutputStream out;

        Conn(Socket socket) throws IOException {
            this.socket = socket;
            this.in = socket.getInputStream();
            this.out = socket.getOutputStream();
        }

        /** The next request, or null when the client closed the connection. */
        Request read() throws IOException {
            ByteArrayOutputStream head = new ByteArrayOutputStream();
            int matched = 0;
            while (matched < 4) {
                int c = in.read();
                if (c < 0) {
                    return null;
                }
                head.write(c);
                matched = (c == '\r' || c == '\n') && "\r\n\r\n".charAt(matched) == c ? matched + 1 : 0;
            }
            String text = new String(head.toByteArray(), StandardCharsets.ISO_8859_1);
            int length = 0;
            for (String line : text.split("\r\n")) {
                if (line.toLowerCase(Locale.ROOT).startsWith("content-length:")) {
                    length = Integer.parseInt(line.substring(15).trim());
                }
            }
            byte[] body = new byte[length];
            for (int at = 0; at < length;) {
                int r = in.read(body, at, length - at);
                if (r < 0) {
                    return null;
                }
                at += r;
            }
            return new Request(text, body);
        }

        void answer(int status, String contentType, byte[] body, String extraHeaders) throws IOException {
            String head = "HTTP/1.1 " + status + " X\r\nContent-Type: " + contentType + "\r\nContent-Length: "
                    + body.length + "\r\n" + extraHeaders + "\r\n";
            out.write(head.getBytes(StandardCharsets.ISO_8859_1));
            out.write(body);
            out.flush();
        }

        void json(int status, String json) throws IOException {
            answer(status, "application/json", json.getBytes(StandardCharsets.UTF_8), "");
        }
    }

    final ServerSocket server;
    final List<Request> requests = Collections.synchronizedList(new ArrayList<Request>());
    private final List<Socket> sockets = Collections.synchronizedList(new ArrayList<Socket>());
    private volatile int accepted;

    FakeAgent(Script script) throws IOException {
        server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread acceptor = new Thread(() -> {
            try {
                while (true) {
                    Socket s = server.accept();
                    sockets.add(s);
                    int index = accepted++;
                    Thread t = new Thread(() -> {
                        try {
                            script.serve(new Conn(s) {
                                @Override
                                Request read() throws IOException {
                                    Request r = super.read();
                                    if (r != null) {
                                        requests.add(r);
                                    }
                                    return r;
                                }
                            }, index);
                        } catch (Exception e) {
                            // the test sees what the client got
                        }
                    });
                    t.setDaemon(true);
                    t.start();
                }
            } catch (IOException e) {
                // closed
            }
        });
        acceptor.setDaemon(true);
        acceptor.start();
    }

    int port() {
        return server.getLocalPort();
    }

    int accepted() {
        return accepted;
    }

    @Override
    public void close() throws IOException {
        server.close();
        synchronized (sockets) {
            for (Socket s : sockets) {
                s.close();
            }
        }
    }
}
