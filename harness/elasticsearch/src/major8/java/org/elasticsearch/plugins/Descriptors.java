package org.elasticsearch.plugins;

import java.util.List;

import org.elasticsearch.Build;

/** The 8.x descriptor of a classpath plugin (see {@link HarnessPluginsService}). */
final class Descriptors {

    private Descriptors() {}

    static PluginDescriptor of(Class<? extends Plugin> c) {
        return new PluginDescriptor(
            c.getName(), "classpath plugin (searchwire harness)", "NA", Build.current().version(),
            Integer.toString(Runtime.version().feature()), c.getName(), null, List.of(),
            false, false, false, false);
    }
}
